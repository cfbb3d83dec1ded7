"""Time vLLM 0.6.3.post1's own host Python for an SD round on this CPU: the estimates behind the `vllm-v0`
preset's host terms (hardware_profiles/engines/vllm-v0.toml, provenance.assumptions).

vLLM is not installed: the script imports the `vllm/` sources of the unpacked wheel without its CUDA
extension (the modules it times are pure Python over CPU tensors), with stubs for the flash-attn kernels and
the Mistral tokenizer it never calls. Set up once:

    pip download --no-deps vllm==0.6.3.post1 -d WHEELS && unzip WHEELS/vllm-0.6.3.post1-*.whl 'vllm/*' -d SRC
    pip install --target DEPS psutil msgspec py-cpuinfo gguf && pip install --no-deps --target DEPS compressed-tensors==0.6.0
    OMP_NUM_THREADS=1 PYTHONPATH=DEPS python benchmarks/vllm_v0_host.py --vllm-src SRC

It prints, per batch B and draft length K = 3, at two contexts: the scheduler per running sequence
(Scheduler.schedule with K lookahead slots), the batch-expansion scorer per expanded row
(BatchExpansionTop1Scorer._expand_batch), the model runner's input preparation per row
(ModelInputForGPUBuilder + SamplingMetadata.prepare), the sampler per row (Sampler.forward over a
1,024-entry vocabulary, so only its Python and op dispatch remain), and the multi-step output processor per
emitted token with and without incremental detokenisation (a byte-level BPE tokenizer of 32,000 entries
trained on the vLLM sources: the Qwen2 / Mixtral tokenizers need a download). Medians of repeats with the
garbage collector off; state the load average beside the figures.
"""

from __future__ import annotations

import argparse
import functools
import gc
import glob
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

BLOCK = 16


def _import_vllm(src: Path) -> None:
    """Make `import vllm.X` load the unpacked sources without running vllm/__init__.py (which loads the
    whole engine and its CUDA extension)."""
    package = types.ModuleType("vllm")
    package.__path__ = [str(src / "vllm")]
    sys.modules["vllm"] = package
    flash = types.ModuleType("vllm.vllm_flash_attn")
    flash.flash_attn_varlen_func = flash.flash_attn_with_kvcache = None  # type: ignore[attr-defined]
    sys.modules["vllm.vllm_flash_attn"] = flash
    tokenizers = types.ModuleType("vllm.transformers_utils.tokenizers")
    tokenizers.MistralTokenizer = type("MistralTokenizer", (), {})  # type: ignore[attr-defined]
    sys.modules["vllm.transformers_utils.tokenizers"] = tokenizers
    # vllm.config first breaks the sequence ↔ sampling-metadata import cycle, as vllm/__init__.py does
    import vllm.config
    from vllm.outputs import CompletionOutput, RequestOutput
    from vllm.sampling_params import SamplingParams

    package.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    package.RequestOutput, package.CompletionOutput = RequestOutput, CompletionOutput  # type: ignore[attr-defined]
    import vllm.model_executor.sampling_metadata as sampling_metadata
    import vllm.utils

    vllm.utils.is_pin_memory_available = lambda: False  # type: ignore[assignment]
    sampling_metadata.is_pin_memory_available = lambda: False  # type: ignore[attr-defined]


def _median_s(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _running(batch: int, k: int, prompt: int, output: int) -> tuple[Any, list[Any]]:
    """A scheduler with `batch` decoding sequences of `prompt` + `output` tokens, K lookahead slots."""
    from vllm.config import CacheConfig, SchedulerConfig
    from vllm.core.scheduler import Scheduler
    from vllm.inputs import token_inputs
    from vllm.sampling_params import SamplingParams
    from vllm.sequence import Sequence, SequenceGroup

    scheduler_config = SchedulerConfig(max(8192, batch * prompt), 256, 8192, num_lookahead_slots=k)
    cache = CacheConfig(block_size=BLOCK, gpu_memory_utilization=0.9, swap_space=0, cache_dtype="auto")
    cache.num_gpu_blocks, cache.num_cpu_blocks = 20000, 0
    scheduler = Scheduler(scheduler_config, cache, None)
    groups = []
    for i in range(batch):
        seq = Sequence(i, token_inputs(prompt_token_ids=list(range(100, 100 + prompt))), BLOCK)
        params = SamplingParams(temperature=0, max_tokens=4096)
        group = SequenceGroup(request_id=str(i), seqs=[seq], arrival_time=time.time(), sampling_params=params)
        scheduler.add_seq_group(group)
        groups.append(group)
    scheduler.schedule()  # the prefill
    for group in groups:
        group.update_num_computed_tokens(prompt)
    _append(groups, output)
    return scheduler, groups


def _append(groups: list[Any], tokens: int) -> None:
    from vllm.sequence import Logprob

    for group in groups:
        for seq in group.get_seqs():
            for _ in range(tokens):
                seq.append_token_id(7, {7: Logprob(0.0)})
        group.update_num_computed_tokens(tokens)


class _Runner:
    """The attributes of a GPU model runner that ModelInputForGPUBuilder reads, on the CPU."""

    def __init__(self) -> None:
        import numpy as np
        import torch
        from vllm.attention.backends.flash_attn import FlashAttentionBackend
        from vllm.config import SchedulerConfig
        from vllm.worker.model_runner import ModelInputForGPUWithSamplingMetadata

        self._model_input_cls = ModelInputForGPUWithSamplingMetadata
        self.attn_backend = FlashAttentionBackend
        self.sliding_window = None
        self.block_size = BLOCK
        self.lora_config = self.prompt_adapter_config = self.multi_modal_input_mapper = None
        self.device, self.pin_memory = torch.device("cpu"), False
        self.max_seq_len_to_capture, self.max_batchsize_to_capture = 8192, 256
        self.model_config = types.SimpleNamespace(
            is_encoder_decoder_model=False, enforce_eager=False, uses_mrope=False
        )
        self.scheduler_config = SchedulerConfig(8192, 256, 8192, num_lookahead_slots=3)
        self.graph_block_tables = np.zeros((256, 8192 // BLOCK), dtype=np.int32)
        self.model_is_mrope = False
        self.inter_data_cache: dict[int, Any] = {}

    def get_max_block_per_batch(self) -> int:
        return 8192 // BLOCK


def _prepare(runner: _Runner, metas: list[Any], cache: Any) -> Any:
    from vllm.model_executor.sampling_metadata import SamplingMetadata
    from vllm.worker.model_runner import ModelInputForGPUBuilder

    builder = ModelInputForGPUBuilder(runner, None)  # type: ignore[arg-type]
    for meta in metas:
        builder.add_seq_group(meta)
    model_input = builder.build()
    sampling = SamplingMetadata.prepare(
        metas, model_input.seq_lens, model_input.query_lens, runner.device, False, None, cache
    )
    return sampling


def _sampler_s(metas: list[Any], sampling: Any, speculative: bool, repeats: int) -> float:
    import torch
    from vllm.model_executor.layers.sampler import Sampler

    sampler = Sampler()
    if speculative:  # what the SD workers set on the target's and the drafter's sampler
        sampler.include_gpu_probs_tensor = True
        sampler.should_modify_greedy_probs_inplace = True
    logits = torch.randn(len(metas), 1024)
    return _median_s(lambda: sampler(logits, sampling), repeats)


def _rows_at(batch: int, k: int, prompt: int, output: int, repeats: int) -> str:
    from vllm.model_executor.sampling_metadata import SamplingMetadataCache
    from vllm.spec_decode.batch_expansion import BatchExpansionTop1Scorer

    scheduler, groups = _running(batch, k, prompt, output)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        metas, _, _ = scheduler.schedule()
        times.append(time.perf_counter() - start)
        _append(groups, k + 1)
    schedule_s = statistics.median(times)
    scorer = BatchExpansionTop1Scorer(None, "cpu", 151936)  # type: ignore[arg-type]
    expand = functools.partial(scorer._expand_batch, metas, [[5] * k for _ in metas], [k] * len(metas))
    expanded = expand()[2]
    expand_s = _median_s(expand, repeats)
    runner, cache = _Runner(), SamplingMetadataCache()
    prepare_s = _median_s(functools.partial(_prepare, runner, expanded, cache), repeats)
    sampler_s = _sampler_s(expanded, _prepare(runner, expanded, cache), True, repeats)
    rows = len(expanded)
    return (
        f"context {prompt + output:5d}, B = {batch:2d}, K = {k}: scheduler {schedule_s * 1e6 / batch:5.1f} µs "
        f"per sequence; per expanded row ({rows}): expansion {expand_s * 1e6 / rows:5.1f} µs, "
        f"input preparation {prepare_s * 1e6 / rows:5.1f} µs, sampler {sampler_s * 1e6 / rows:5.1f} µs"
    )


def measure_rows(prompt: int, output: int, repeats: int, k: int = 3) -> None:
    for batch in (8, 24, 48):
        print(_rows_at(batch, k, prompt, output, repeats), flush=True)


class _Outputs:
    """`batch` running sequences and vLLM's multi-step output processor over them."""

    def __init__(self, tokenizer: Any, ids: list[int], batch: int, detokenize: bool) -> None:
        from vllm.engine.output_processor.multi_step import MultiStepOutputProcessor
        from vllm.engine.output_processor.stop_checker import StopChecker
        from vllm.inputs import token_inputs
        from vllm.sampling_params import SamplingParams
        from vllm.sequence import Sequence, SequenceGroup, SequenceStatus
        from vllm.transformers_utils.detokenizer import Detokenizer
        from vllm.utils import Counter

        tokenizers = types.SimpleNamespace(get_lora_tokenizer=lambda lora_request=None: tokenizer)
        self.processor = MultiStepOutputProcessor(
            Detokenizer(tokenizers),  # type: ignore[arg-type]
            [None],  # type: ignore[list-item]
            Counter(),
            lambda seq: tokenizer,
            StopChecker(8192, lambda seq: tokenizer),  # type: ignore[arg-type]
        )
        self.ids, self.position, self.groups = ids, 200, []
        for i in range(batch):
            seq = Sequence(i, token_inputs(prompt_token_ids=ids[:200]), BLOCK)
            params = SamplingParams(temperature=0, max_tokens=100000, detokenize=detokenize, ignore_eos=True)
            seq.status = SequenceStatus.RUNNING
            seq.data.update_num_computed_tokens(200)
            self.groups.append(SequenceGroup(str(i), [seq], time.time(), sampling_params=params))

    def round(self, tokens: int) -> None:
        """Every sequence emits `tokens` tokens, as an SD round's accepted tokens reach the processor."""
        from vllm.sequence import CompletionSequenceGroupOutput, Logprob, SequenceOutput

        for group in self.groups:
            seq_id = group.seqs[0].seq_id
            emitted = self.ids[self.position : self.position + tokens]
            outputs = [
                CompletionSequenceGroupOutput([SequenceOutput(seq_id, t, {t: Logprob(0.0)})], None)
                for t in emitted
            ]
            self.processor.process_outputs(group, outputs, False)
        self.position += tokens


def measure_outputs(src: Path, repeats: int) -> None:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    files = sorted(glob.glob(str(src / "vllm" / "**" / "*.py"), recursive=True))[:300]
    bpe = ByteLevelBPETokenizer()
    bpe.train(files, vocab_size=32000, show_progress=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|eos|>")
    ids = tokenizer("".join(Path(f).read_text() for f in files[:40]))["input_ids"]
    for detokenize in (False, True):
        for batch, tokens in ((24, 1), (24, 4), (48, 4)):
            outputs = _Outputs(tokenizer, ids, batch, detokenize)
            for _ in range(200):  # 200 generated tokens before timing
                outputs.round(1)
            per_token = _median_s(functools.partial(outputs.round, tokens), repeats) / (batch * tokens)
            print(
                f"output processing, detokenise {detokenize!s:5}, B = {batch}, {tokens} tokens per sequence: "
                f"{per_token * 1e6:5.1f} µs per token",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-src", type=Path, required=True, help="folder holding the wheel's vllm/")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    _import_vllm(args.vllm_src)
    gc.disable()
    for prompt, output in ((200, 200), (300, 1748)):
        measure_rows(prompt, output, args.repeats)
    measure_outputs(args.vllm_src, args.repeats)


if __name__ == "__main__":
    main()
