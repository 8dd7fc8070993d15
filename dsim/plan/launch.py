"""The command that starts a configuration on its engine (`vllm serve ...`,
`python -m sglang.launch_server ...`), and whether that engine ships its policy.

vLLM and SGLang ship plain decoding and a fixed number of drafts per round (vLLM's
`num_speculative_tokens`, SGLang's `--speculative-num-steps`), MTP-1 included; vLLM also ships
its adaptive verification (`vllm-adaptive`: `"enable_adaptive_verification": true` in
`--speculative-config`, read by the proposers whose drafters report a confidence, such as
DSpark's and DFlash's). Neither ships dsim's other per-round verify lengths (dspark,
dspark-async, goodput, threshold:h) nor the clairvoyant oracle. The drafter is the one the
configuration's drafter profile was priced for (its sidecar's `draft_model`), else the
acceptance spec's (`preset:DRAFTER:DOMAIN`); its weights are the user's to name
(`--draft-model-path`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from dsim import bundles, spec_grammar
from dsim.plan.space import Config

# dsim's model names -> the Hugging Face repositories they describe (dsim.hardware.zoo).
HF_NAMES = {
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-14b": "Qwen/Qwen3-14B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "llama3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama2-7b": "meta-llama/Llama-2-7b-hf",
    "llama2-70b": "meta-llama/Llama-2-70b-hf",
    "llama3.3-70b": "meta-llama/Llama-3.3-70B-Instruct",
    "bloom-176b": "bigscience/bloom",
}
SHIPPED = {
    "vllm": ("ar", "fixed", "mtp1", "vllm-adaptive"),
    "sglang": ("ar", "fixed", "mtp1"),
}
# A drafter's method in each engine; any other drafter runs as a separate draft model.
VLLM_METHODS = {"eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp"}
SGLANG_ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN"}
DRAFT_PATH = "DRAFT_MODEL_PATH"  # the placeholder when the user names no drafter weights


@dataclass(frozen=True)
class Launch:
    commands: tuple[str, ...]  # one per kind of instance (prefill, decode, or all)
    notes: tuple[str, ...]


def shipped(policy: str, engine: str) -> bool:
    return spec_grammar.name_arg(policy)[0] in SHIPPED.get(engine, ())


def drafter(acceptance: str) -> str | None:
    """The drafter a `preset:DRAFTER:DOMAIN` acceptance names (None for any other spec)."""
    parts = spec_grammar.acceptance(acceptance)
    if parts and len(parts) == 1 and parts[0].kind == "preset":
        return spec_grammar.preset(parts[0])[0]
    return None


def own_head(c: Config, draft: str | None) -> bool:
    """Whether `c` drafts with the model's own MTP head: `mtp1` with no drafter named or an
    `mtp` one (with an EAGLE or other drafter, `mtp1` is that drafter at one token a round)."""
    return c.policy == "mtp1" and draft in (None, "mtp")


def _vllm(c: Config, model: str, draft: str | None, path: str) -> list[str]:
    words = [f"vllm serve {model}", f"--tensor-parallel-size {c.target.tp}",
             f"--max-num-seqs {c.max_seqs}"]  # fmt: skip
    if c.token_budget is not None:
        words.append(f"--max-num-batched-tokens {c.token_budget}")
    if c.policy != "ar":
        method = "mtp" if own_head(c, draft) else VLLM_METHODS.get(draft or "", "draft_model")
        spec = {"method": method}
        if method != "mtp":
            spec["model"] = path
        spec["num_speculative_tokens"] = c.gamma
        if spec_grammar.name_arg(c.policy)[0] == "vllm-adaptive":
            spec["enable_adaptive_verification"] = True
        words.append(f"--speculative-config '{json.dumps(spec)}'")
    if c.layout.disagg is not None:
        kv = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        words.append(f"--kv-transfer-config '{json.dumps(kv)}'")
    return [" ".join(words)]


def _sglang(c: Config, model: str, draft: str | None, path: str) -> list[str]:
    words = [f"python -m sglang.launch_server --model-path {model}", f"--tp {c.target.tp}",
             f"--max-running-requests {c.max_seqs}"]  # fmt: skip
    if c.token_budget is not None:
        words.append(f"--chunked-prefill-size {c.token_budget}")
    if c.policy != "ar":
        algo = "NEXTN" if own_head(c, draft) else SGLANG_ALGORITHMS.get(draft or "", "STANDALONE")
        words.append(f"--speculative-algorithm {algo}")
        if algo != "NEXTN":
            words.append(f"--speculative-draft-model-path {path}")
        words += [f"--speculative-num-steps {c.gamma}", "--speculative-eagle-topk 1",
                  f"--speculative-num-draft-tokens {c.gamma + 1}"]  # fmt: skip
    line = " ".join(words)
    if c.layout.disagg is None:
        return [line]
    return [f"{line} --disaggregation-mode {mode}" for mode in ("prefill", "decode")]


BUILDERS = {"vllm": _vllm, "sglang": _sglang}


def launch(c: Config, acceptance: str, draft_path: str | None) -> Launch | None:
    """The engine command of `c` (None: dsim knows no command for its engine, or the engine
    does not ship its policy)."""
    build = BUILDERS.get(c.target.engine)
    if build is None or not shipped(c.policy, c.target.engine):
        return None
    draft = bundles.draft_model(c.target.draft_cost) or drafter(acceptance)
    model = HF_NAMES.get(c.target.model, c.target.model)
    notes = []
    p, d = c.layout.split
    if p:
        notes.append(f"{p} prefill and {d} decode instances (each {c.target.tp} GPUs), "
                     "joined by the engine's disaggregation router")  # fmt: skip
    elif d > 1:
        notes.append(f"{d} instances behind a load balancer, each {c.target.tp} GPUs")
    speculative = c.policy != "ar" and not own_head(c, draft)
    if speculative and draft_path is None:
        notes.append(f"{DRAFT_PATH}: the {draft or 'draft'} model's weights (--draft-model-path)")
    if speculative and draft not in VLLM_METHODS:
        notes.append(f"the {draft or 'given'} drafter runs as a separate draft model")
    return Launch(tuple(build(c, model, draft, draft_path or DRAFT_PATH)), tuple(notes))
