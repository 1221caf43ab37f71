"""Speed measurements, side by side with the peer each speed-up beats (see the README)."""


def sampling_arguments(parser) -> None:
    """The sampling settings of the sampler benchmark, which it hands its vLLM peer unchanged: one
    definition, so the two time the same work."""
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--repeats", type=int, default=3)
