"""Write a reproducible example history of runs derived from the two seeds, in both formats.

Several series, labels (commit-like ids, one per day) and repeats, with realistic multiplicative
noise (log-normal per kernel, per run and per label, plus rare slow outlier runs) and planted
step changes at known labels. The same options always write the same bytes.

layout of OUT:
  runs/<series>/<seq>_<label>_r<k>.json            one run in the seed's JSON format
  runs/<series>/<seq>_<label>_r<k>.json.meta.json  sidecar: series, label, captured_at
  ground_truth.json                                the spec, the labels and what was planted

default history: series decoder-tile and encoder-tile (tile profiles) and vae-conv-audit (conv
audits); 24 labels of 3 repeats, every 7th label with a single run; planted: decoder-tile
attention_softmax_d72_p768_tail_f8_sm4 x1.20 at label 8, decoder-tile
gemm_f16_init_large_rows_interleaved_k80_c112_r121_r122 x0.82 at label 16, vae-conv-audit
family cudnn::nchwToNhwcKernel x1.30 at label 12, encoder-tile fill_zero_u64 x1.25 at label 23
(the latest). Default plants beyond --labels are dropped.

scenarios (--scenario NAME, see --list-scenarios): named histories that each show one behaviour
of the verdicts (noise kinds, early steps, a single kernel, one run per label, a revert, drift,
shuffled files, vanishing kernels, 12 and 30 labels), two series each: NAME-tile and NAME-audit.
--seed, --labels and --repeats still apply; the scenario sets the rest.

trace scenarios (issue 20): generated multi-rank PyTorch-profiler (Kineto) histories, one series
named after the scenario, 12 labels x 3 jobs x 4 rank files (--ranks), planted at label #6
(--labels // 2), judged in marts.trace_trends (score: python -m bench.trace_verdicts):
  trace-kernel-swap      aten::mm launches another kernel, +15% GPU time: op_kernel_ns aten::mm
  trace-idle-growth      input pipeline stalls, no kernel slower: gpu_idle_share, step_time
  trace-straggler        the last rank 10% slower: step_time of key 'rank N'
  trace-slow-collective  the NCCL allreduce +20%: communication_ns
  trace-noise            nothing planted: every flag is false
layout: runs/<series>/<series>-<seq>_<label>_r<k>/rank<r>.pt.trace.json (+ .meta.json
sidecars), one folder per job (its name); ground_truth.json lists every (fact, key) the plant moves and by how much.

examples:
  pwh synth /tmp/history --ingest            write it and ingest it into the warehouse
  pwh synth /tmp/early --scenario early-label-2 --ingest && pwh build
  pwh synth /tmp/noise --no-plants --labels 30 --series noise=tile_profile
  pwh synth /tmp/h --plant decoder-tile 5 1.15 copy_u64
  pwh synth /tmp/swap --scenario trace-kernel-swap --ingest && pwh build
"""

from __future__ import annotations

import sys

COMMAND = (25, "synth", "write a reproducible example history of runs (with planted changes)")


def add_arguments(p):
    p.add_argument("out", metavar="OUT", nargs="?",
                   help="folder to write (must not exist or be empty)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--labels", type=int, default=24, help="labels per series (default 24)")
    p.add_argument("--repeats", type=int, default=3, help="runs per label (default 3)")
    p.add_argument("--single-repeat-every", type=int, default=7, metavar="K",
                   help="every K-th label has a single run (default 7; 0: never)")
    p.add_argument("--noise-pct", type=float, default=2.0,
                   help="log-normal sigma per kernel and run, percent (default 2)")
    p.add_argument("--run-noise-pct", type=float, default=1.0,
                   help="sigma shared by all kernels of a run, percent (default 1)")
    p.add_argument("--label-noise-pct", type=float, default=0.5,
                   help="sigma shared by the runs of a label, percent (default 0.5)")
    p.add_argument("--outlier-rate", type=float, default=0.01,
                   help="probability that a (run, kernel) is an outlier x1.1-1.4 (default 0.01)")
    p.add_argument("--start", default="2026-01-05T09:00:00Z",
                   help="capture time of the first label, ISO 8601 (default 2026-01-05T09:00Z)")
    p.add_argument("--series", action="append", metavar="NAME=FORMAT",
                   help="a series and its format (tile_profile or conv_audit); repeatable "
                        "(default: decoder-tile, encoder-tile, vae-conv-audit)")
    p.add_argument("--plant", action="append", nargs=4,
                   metavar=("SERIES", "LABEL_SEQ", "FACTOR", "KERNEL"),
                   help="KERNEL (tile kernel or audit short name) is FACTOR times slower from "
                        "label LABEL_SEQ (0-based) on; repeatable; replaces the default plants")
    p.add_argument("--plant-family", action="append", nargs=4,
                   metavar=("SERIES", "LABEL_SEQ", "FACTOR", "FAMILY"),
                   help="same for every audit kernel of a family (e.g. cudnn::nchwToNhwcKernel)")
    p.add_argument("--no-plants", action="store_true", help="pure noise: plant nothing")
    p.add_argument("--scenario", metavar="NAME",
                   help="a named history (see --list-scenarios); replaces the series, noise and "
                        "plants options")
    p.add_argument("--ranks", type=int, default=None, metavar="N",
                   help="trace scenarios only: rank files per job (default 4)")
    p.add_argument("--list-scenarios", action="store_true",
                   help="list the scenarios and what each plants, then exit")
    p.add_argument("--force", action="store_true", help="replace OUT if it is not empty")
    p.add_argument("--ingest", action="store_true",
                   help="then ingest OUT/runs into the warehouse (same as pwh ingest OUT/runs)")


def _spec(args):
    from warehouse import scenarios, synth

    if args.scenario:
        if args.plant or args.plant_family or args.no_plants or args.series:
            raise synth.SynthError("--scenario sets the series and plants: drop --series, "
                                   "--plant, --plant-family and --no-plants")
        try:
            spec = scenarios.spec(args.scenario, args.seed)
        except KeyError as exc:
            from warehouse import trace_scenarios

            raise synth.SynthError(f"{exc.args[0]}; trace scenarios: "
                                   f"{', '.join(trace_scenarios.names())}") from None
        over = {}
        if args.labels != 24:
            over["labels"] = args.labels
        if args.repeats != 3:
            over["repeats"] = args.repeats
        if over:
            import dataclasses

            spec = dataclasses.replace(spec, **over)
            spec = dataclasses.replace(spec, plants=tuple(
                p for p in spec.plants if p.label_seq < spec.labels))
        return spec

    series = synth.DEFAULT_SERIES
    if args.series:
        series = []
        for s in args.series:
            name, sep, fmt = s.partition("=")
            if not sep:
                raise synth.SynthError(f"--series {s!r}: expected NAME=FORMAT")
            series.append(synth.SeriesSpec(name.strip(), fmt.strip()))
        series = tuple(series)
    plants = []
    for match, given in (("kernel", args.plant or []), ("family", args.plant_family or [])):
        for s, seq, factor, kernel in given:
            try:
                plants.append(synth.Plant(s, int(seq), kernel, float(factor), match))
            except ValueError:
                raise synth.SynthError(
                    f"--plant{'-family' if match == 'family' else ''} {s} {seq} {factor} "
                    f"{kernel}: LABEL_SEQ must be an integer and FACTOR a number") from None
    if args.no_plants:
        if plants:
            raise synth.SynthError("--no-plants contradicts --plant/--plant-family")
        plants = ()
    elif not plants:
        names = {s.name for s in series}
        plants = tuple(p for p in synth.DEFAULT_PLANTS
                       if p.series in names and p.label_seq < args.labels)
    return synth.HistorySpec(
        seed=args.seed, labels=args.labels, repeats=args.repeats,
        single_repeat_every=args.single_repeat_every, noise_pct=args.noise_pct,
        run_noise_pct=args.run_noise_pct, label_noise_pct=args.label_noise_pct,
        outlier_rate=args.outlier_rate, start=args.start, series=tuple(series),
        plants=tuple(plants))


def run(args, settings) -> int:
    from pathlib import Path

    from warehouse import synth

    if args.list_scenarios:
        from warehouse import scenarios, trace_scenarios

        for name, (desc, kind, _, _) in scenarios.SCENARIOS.items():
            print(f"{name:16s} {kind:6s} {desc}")
        for name, (desc, _) in trace_scenarios.SCENARIOS.items():
            print(f"{name:21s} trace  {desc}")
        return 0
    if args.scenario and args.scenario.startswith("trace-"):
        return _trace(args, settings)
    if args.ranks is not None:
        print("pwh synth: --ranks applies to the trace scenarios only", file=sys.stderr)
        return 2
    def build():
        spec = _spec(args)
        return spec, synth.generate(args.out, spec, force=args.force)

    written = _write(args, build)
    if isinstance(written, int):
        return written
    spec, truth = written
    out = Path(args.out).resolve()
    print(f"wrote {len(truth['files'])} runs: {len(spec.series)} series x {spec.labels} labels "
          f"to {out / 'runs'}")
    print(f"ground truth: {out / synth.GROUND_TRUTH}")
    for p in truth["plants"]:
        print(f"  planted {p['direction']}: {p['series']} {p['match']} {p['kernel']} "
              f"x{p['factor']:g} at label {p['label']} (#{p['label_seq']})")
    if not truth["plants"]:
        print("  no plants: pure noise")
    return _ingest_or_hint(out, args, settings)


def _trace(args, settings) -> int:
    """``--scenario trace-…``: a generated multi-rank Kineto history (warehouse.trace_scenarios)."""
    from pathlib import Path

    from warehouse import trace_scenarios as ts

    def build():
        if args.plant or args.plant_family or args.no_plants or args.series:
            raise ts.TraceScenarioError("--scenario sets the series and plants: drop --series, "
                                        "--plant, --plant-family and --no-plants")
        spec = ts.spec(args.scenario, args.seed,
                       labels=None if args.labels == 24 else args.labels,
                       repeats=None if args.repeats == 3 else args.repeats, ranks=args.ranks)
        return spec, ts.generate(args.out, spec, force=args.force)

    written = _write(args, build)
    if isinstance(written, int):
        return written
    spec, truth = written
    out = Path(args.out).resolve()
    print(f"wrote {len(truth['files'])} rank traces: {spec.labels} labels x {spec.repeats} jobs "
          f"x {spec.ranks} ranks to {out / 'runs'}")
    print(f"ground truth: {out / ts.GROUND_TRUTH}")
    for e in truth["expected"]:
        print(f"  expected {e['direction']}: {e['series']} {e['fact']} {e['key']} "
              f"{e['expected_delta_pct']:+.1f}% at label {e['label']} (#{e['label_seq']})")
    return _ingest_or_hint(out, args, settings)


def _write(args, build):
    """``build()`` writes the history to OUT and returns (spec, ground truth); or the exit
    status after saying why it could not: 2 for a usage error, 1 when OUT cannot be written."""
    from warehouse.synth import SynthError

    try:
        if not args.out:
            raise SynthError("OUT is required (the folder to write)")
        return build()
    except SynthError as exc:
        print(f"pwh synth: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pwh synth: {args.out}: cannot write the history: {exc.strerror or exc} "
              "(nothing was written)", file=sys.stderr)
        return 1


def _ingest_or_hint(out, args, settings) -> int:
    """--ingest: ingest the written runs now; else say how."""
    if args.ingest:
        from warehouse.cli.ingest import run as ingest_run

        class _Args:
            paths = [str(out / "runs")]
            series = label = captured_at = None
            quiet = True

        return ingest_run(_Args, settings)
    print(f"next: pwh ingest {out / 'runs'} && pwh build")
    return 0
