"""`vllm bench serve`'s workload options, read as the trace spec they mean, so the benchmark's
names run through dsim's own machinery (`dsim.workload.synthetic`: its arrival process,
random lengths, a file's rows in order, the closed-loop client), not a second one.

  --request-rate R (req/s; inf: all at once)   rate=R with the benchmark's arrivals
  --burstiness B (gamma shape; 1: Poisson)     burstiness=B (needs --request-rate)
  --max-concurrency C                          concurrency=C (closed loop)
  --num-prompts N                              n=N (alone on a file trace: its first N rows)
  --dataset-name random, --random-input-len L, --random-output-len O, --random-range-ratio X
                                               prompt=L,output=O,range_ratio=X

With a file trace, --request-rate or --max-concurrency replace its timestamps by the
benchmark's sends and keep its rows' lengths in order, as the benchmark does with a dataset.
"""

from __future__ import annotations

from typing import Any

from dsim import spec_grammar
from dsim.errors import InputError

OPTIONS = (
    "request_rate",
    "burstiness",
    "max_concurrency",
    "num_prompts",
    "dataset_name",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
)
# vLLM's defaults where dsim needs one (vllm/benchmarks/serve.py, datasets RandomDataset).
NUM_PROMPTS, INPUT_LEN, OUTPUT_LEN, RANGE_RATIO = 1000, 1024, 128, 0.0
# Longest random length: above every context window dsim knows (DeepSeek-V3: 163,840).
MAX_LEN = 2**20
RANDOM = ("random_input_len", "random_output_len", "random_range_ratio")


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def _number(given: dict, name: str, **bounds: float) -> float:
    return spec_grammar.number(str(given[name]), _flag(name), **bounds)


def _positive_or_inf(given: dict, name: str) -> str:
    """A rate or burstiness as the benchmark takes it: > 0, or inf."""
    if str(given[name]).strip() == "inf":
        return "inf"
    return f"{_number(given, name, gt=0):g}"


def trace_spec(trace: str, options: dict[str, Any]) -> tuple[str, int | None]:
    """(the trace spec the benchmark options mean for `trace`, a request cap or None); the
    options not given are None or absent."""
    given = {k: options[k] for k in OPTIONS if options.get(k) is not None}
    if not given:
        return trace, None
    keys: dict[str, str] = {}
    if "request_rate" in given:
        keys["rate"] = _positive_or_inf(given, "request_rate")
        keys["burstiness"] = _positive_or_inf(given, "burstiness") if "burstiness" in given else "1"
    elif "burstiness" in given:
        raise InputError(None, None, "--burstiness shapes --request-rate's arrivals: give both")
    if "max_concurrency" in given:
        keys["concurrency"] = str(int(_number(given, "max_concurrency", ge=1, integer=True)))
    if "num_prompts" in given:
        keys["n"] = str(int(_number(given, "num_prompts", ge=1, integer=True)))
    if "dataset_name" in given or any(k in given for k in RANDOM):
        return _random(given, keys), None
    if not spec_grammar.is_synthetic(trace):
        if not ({"rate", "concurrency"} & set(keys)):
            return trace, int(keys["n"])  # the file's own send times, its first N rows
        escaped = trace.replace("\\", "\\\\").replace('"', '\\"')
        return _join(f'lengths="{escaped}"', keys), None
    body = spec_grammar.name_arg(trace)[1]
    clash = set(spec_grammar.key_values(body, f"trace spec {trace!r}")) & set(keys)
    if clash:
        raise InputError(
            None,
            None,
            f"--trace {trace!r} and the benchmark options both set {sorted(clash)}: give one",
        )
    return _join(body, keys), None


def _random(given: dict, keys: dict[str, str]) -> str:
    """`--dataset-name random`: vLLM's random lengths, sent all at once unless a rate or a
    concurrency says otherwise (the benchmark's default rate is inf)."""
    name = given.get("dataset_name", "random")
    if name != "random":
        problem = "dsim draws only random; give a dataset's lengths as --trace FILE"
        raise InputError(None, None, f"--dataset-name {name!r}: {problem}")
    lengths = {}
    for key, option, default, bounds in (
        ("prompt", "random_input_len", INPUT_LEN, {"ge": 1, "le": MAX_LEN, "integer": True}),
        ("output", "random_output_len", OUTPUT_LEN, {"ge": 1, "le": MAX_LEN, "integer": True}),
        ("range_ratio", "random_range_ratio", RANGE_RATIO, {"ge": 0, "lt": 1}),
    ):
        value = _number(given, option, **bounds) if option in given else default
        lengths[key] = f"{value:g}"
    keys.setdefault("rate", "inf")
    keys.setdefault("burstiness", "1")
    keys.setdefault("n", str(NUM_PROMPTS))
    return _join(",".join(f"{k}={v}" for k, v in lengths.items()), keys)


def _join(body: str, keys: dict[str, str]) -> str:
    extra = ",".join(f"{k}={v}" for k, v in keys.items())
    return f"synthetic:{body},{extra}" if body else f"synthetic:{extra}"
