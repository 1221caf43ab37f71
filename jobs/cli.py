"""`nograd`: the command line each Snakemake rule calls, usable on its own too.

Each command takes the experiment config (`--config FILE` or `--config-json TEXT`, the form
the Snakefile passes) and the paths of its inputs and outputs. An error the user can fix ends
the command with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
from pathlib import Path

# A job spends most of its start importing torch, transformers and MLflow (5-7 s on the 2-core CPU),
# during which CPython's cycle collector, at its default threshold of 700 allocations, collects
# about 1,570 times (8 of them over the whole heap, which grows to about 635,000 objects): about a
# sixth of the imports' time. Collections every 50,000 allocations instead (as mypy does) leave at
# most that many objects' worth of cyclic garbage uncollected, against the model's hundreds of MB.
gc.set_threshold(50_000)

from core import config as configuration  # noqa: E402
from core import machine  # noqa: E402
from core.errors import NogradError  # noqa: E402
from jobs import data, devices, validation  # noqa: E402


def _config(args, chosen: bool = True) -> configuration.Config:
    """The job's config; `chosen`: with `dtype` and `sampler` chosen where it says 'auto' (core/machine.py)."""
    if args.config_json:
        try:
            raw = json.loads(args.config_json)
        except json.JSONDecodeError as error:
            raise NogradError(f"config: --config-json is not valid JSON: {error}") from None
        cfg = validation.validate(raw, source="config")
    else:
        cfg = validation.load(args.config)
    return machine.resolve(cfg)[0] if chosen else cfg


def _chosen(args) -> tuple[configuration.Config, dict[str, machine.Choice]]:
    """The job's config with `dtype` and `sampler` chosen, and each choice with its reason."""
    return machine.resolve(_config(args, chosen=False))


def cmd_schema(args) -> None:
    sys.stdout.write(validation.schema_yaml())


def cmd_paper_config(args) -> None:
    sys.stdout.write(validation.paper_config_yaml())


def cmd_plan(args) -> None:
    from jobs import plan

    source = "given"
    if args.tokens_per_second is None and (measured := plan.measured_throughput()):
        args.tokens_per_second, source = measured
    elif args.tokens_per_second is not None and args.tokens_per_second <= 0:
        raise NogradError(f"--tokens-per-second must be positive, not {args.tokens_per_second}")
    from reports import power

    assumptions = power.Assumptions()
    if args.from_summary is not None:
        if not args.from_summary.exists():
            raise NogradError(f"--from: no summary at {args.from_summary} (run the DAG's collect first)")
        assumptions = power.Assumptions.measured(json.loads(args.from_summary.read_text()))
    given = {k: getattr(args, k) for k in ("flip_rate", "disagreement", "seed_spread", "grpo_gain")
             if getattr(args, k) is not None}
    if given:
        assumptions = dataclasses.replace(assumptions, **given,
                                          source=assumptions.source + "; given: " + ", ".join(given))
    sys.stdout.write(plan.render(validation.load(args.configfile), args.tokens_per_second, source, assumptions))


def cmd_probe(args) -> None:
    choices = machine.decide(_config(args, chosen=False), fresh=args.fresh)
    print(machine.describe(machine.fingerprint()))
    for name, choice in choices.items():
        print(f"{name}: {choice.value} ({choice.setting}: {choice.reason})")


def cmd_prepare_model(args) -> None:
    from core import models

    manifest = models.prepare(_config(args).model, args.out.parent)
    print(f"model {manifest['name']}: {manifest['source']} -> {manifest['path']}")


def cmd_prepare_data(args) -> None:
    manifest = data.prepare(_config(args), args.task, args.out.parent)
    for split in ("train", "test"):
        print(f"{args.task} {split}: {manifest[split]['size']} problems from {data.describe(manifest[split])}")


def cmd_init_tracking(args) -> None:
    from core.outputs import write_json
    from jobs import tracking

    write_json(args.out, tracking.init(_config(args)))


def cmd_mlflow_ui(args) -> None:
    from core.outputs import read_json
    from jobs import tracking

    if not args.tracking.exists():
        raise NogradError(f"{args.tracking} not found: run `snakemake` first (its tracking rule creates the "
                          "experiment)")
    coordinates = read_json(args.tracking)
    uri = coordinates["tracking_uri"]
    if uri.startswith(("http://", "https://")):  # a tracking server: its UI is already up
        print(f"runs: {tracking.runs_url(uri, coordinates['experiment_id'])}", flush=True)
        return
    print(f"runs: {tracking.runs_url(f'http://{tracking.HOST}:{args.port}', coordinates['experiment_id'])}",
          flush=True)
    tracking.serve(uri, args.port)


def cmd_mlflow_server(args) -> None:
    from jobs import tracking

    with tracking.postgres(args.data, args.database_port) as database:  # stopped after the server, however it ends
        print(f"MLflow server on PostgreSQL ({database}, data in {args.data}): set tracking_uri: "
              f"http://{tracking.HOST}:{args.port} in the config; Ctrl-C stops both", flush=True)
        tracking.serve(database, args.port)


def cmd_train(args) -> None:
    from jobs import train as training

    training.train(_config(args), args.method, args.task, args.seed, args.model, args.data, args.tracking, args.out)


def cmd_evaluate(args) -> None:
    from jobs import evaluate

    result = evaluate.evaluate(_config(args), args.method, args.task, args.seed, args.artifact, args.data,
                               args.tracking, args.out)
    print(f"{args.method} {args.task} seed{args.seed}: greedy {result['greedy']['value']:.3f}, "
          + ", ".join(f"pass@{r['k']} {r['value']:.3f}" for r in result["pass_at_k"]))


def cmd_crosscheck(args) -> None:
    from jobs import crosscheck

    result = crosscheck.crosscheck(_config(args), args.method, args.task, args.seed, args.artifact, args.data,
                                   args.out)
    if result["applicable"]:
        print(f"{args.method} {args.task} seed{args.seed}: lm-eval greedy {result['accuracy']:.3f} on "
              f"{result['problems']} problems ({result['prompts_identical']} prompts identical to nograd's)")
    else:
        print(f"{args.method} {args.task} seed{args.seed}: not applicable ({result['reason']})")


def cmd_collect(args) -> None:
    from jobs import collect

    cfg, choices = _chosen(args)
    summary = collect.collect(cfg, args.metrics, args.model, args.data, args.out, args.completions,
                              args.train_metrics, args.crosschecks, choices)
    print(f"collected {len(summary['results'])} results into {args.out}")


def cmd_report(args) -> None:
    from jobs import collect

    paths = collect.report(_config(args), args.summary, args.tracking, args.out.parent)
    print("report: " + ", ".join(str(p) for p in paths.values()))


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="nograd", description=__doc__.splitlines()[0])
    commands = root.add_subparsers(dest="command", required=True)

    def command(name, func, help, **paths):
        sub = commands.add_parser(name, help=help)
        if name not in ("schema", "paper-config", "plan", "mlflow-ui", "mlflow-server"):
            given = sub.add_mutually_exclusive_group(required=True)
            given.add_argument("--config", type=Path, help="experiment config file (YAML)")
            given.add_argument("--config-json", help="experiment config as JSON (what the Snakefile passes)")
        for flag, kwargs in paths.items():
            sub.add_argument(f"--{flag}", **kwargs)
        sub.set_defaults(func=func)

    path = dict(type=Path, required=True)
    run = dict(method=dict(required=True), task=dict(required=True), seed=dict(type=int, required=True),
               gpus=dict(type=int, help="GPUs the job holds (default: the config's resources for the method)"))
    command("schema", cmd_schema, "print the config schema generated from the config dataclasses")
    command("paper-config", cmd_paper_config, "print config/paper.yaml: every method at its paper's defaults")
    command("plan", cmd_plan, "print what every job of the DAG will ask of the model, and device-hours",
            configfile=dict(type=Path, default=configuration.REPO / "config" / "config.yaml",
                            help="the config the DAG would run (default: config/config.yaml)"),
            **{"tokens-per-second": dict(type=float, help="generated tokens per second on one device (default: "
                                         "what benchmarks.sampler measured, in results/speed/sampler.json)"),
               "from": dict(type=Path, dest="from_summary", help="take the power table's assumptions from an "
                            "earlier run's results/summary.json"),
               **{name: dict(type=float, help=f"the power table's {name.replace('-', ' ')} (a share: 0.01 is one "
                             "point)") for name in ("flip-rate", "disagreement", "seed-spread", "grpo-gain")}})
    command("probe", cmd_probe, "choose dtype and sampler where the config says 'auto', by measuring this machine "
            "(kept in results/machine)", fresh=dict(action="store_true", help="measure again, even where this "
                                                    "machine's figures are kept"))
    command("prepare-model", cmd_prepare_model, "resolve and convert the model once", out=path)
    command("prepare-data", cmd_prepare_data, "prepare one task's splits", task=dict(required=True), out=path)
    command("init-tracking", cmd_init_tracking, "create the MLflow database and experiment", out=path)
    command("train", cmd_train, "train one (method, task, seed)", **run, model=path, data=path, tracking=path,
            out=path)
    command("evaluate", cmd_evaluate, "evaluate one trained artifact", **run, artifact=path, data=path,
            tracking=path, out=path)
    command("crosscheck", cmd_crosscheck, "greedy accuracy of one artifact through lm-evaluation-harness", **run,
            artifact=path, data=path, out=path)
    files = dict(type=Path, nargs="+", required=True)
    optional_files = dict(type=Path, nargs="*", default=[])
    command("collect", cmd_collect, "gather every result (evaluations, completions, training histories, "
            "cross-checks) into one summary", metrics=files, model=path, data=files, out=path,
            completions=optional_files, **{"train-metrics": optional_files, "crosschecks": optional_files})
    port = dict(type=int, default=5000, help="the UI's port on 127.0.0.1 (default: 5000)")
    command("mlflow-ui", cmd_mlflow_ui, "print the URL of the runs table and serve the MLflow UI on the run's store",
            tracking=dict(type=Path, default=Path("results/tracking.json"),
                          help="what the tracking rule wrote (default: results/tracking.json)"), port=port)
    command("mlflow-server", cmd_mlflow_server, "an MLflow server for many writers, on a PostgreSQL of its own",
            data=dict(type=Path, default=Path("results/postgres"),
                      help="the PostgreSQL data directory, created on first use (default: results/postgres)"),
            port=port, **{"database-port": dict(type=int, default=5433,
                                                help="PostgreSQL's port (default: 5433, not a system server's 5432)")})
    command("report", cmd_report, "render the report from the summary and log it to MLflow", summary=path,
            tracking=path, out=path)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    # Before anything imports huggingface_hub (validating a config imports the methods, and so
    # transformers): it reads HF_HUB_OFFLINE once, and without it each offline hub lookup is
    # retried for about 20 s.
    data.skip_unreachable_hub()
    try:
        if hasattr(args, "gpus"):  # a job on a model: its own devices, claimed before anything starts CUDA
            cfg = _config(args, chosen=False)  # before anything starts CUDA, which choosing a dtype may
            count = args.gpus if args.gpus is not None else cfg.resources.for_method(args.method)
            devices.claim(count, f"{args.method} {args.task} seed{args.seed}")
        args.func(args)
    except NogradError as error:
        print(f"nograd {args.command}: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
