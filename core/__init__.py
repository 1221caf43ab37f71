"""The foundation: what methods and evaluations stand on. It imports no module above it."""
