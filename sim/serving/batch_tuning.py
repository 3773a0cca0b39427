"""TensorRT-LLM's dynamic batch-size tuning: the executor caps the batch it schedules at a
size read from a table by how many requests of the running average lengths the KV cache
holds (issue 21; a runtime profile's ``batch_size_tuning``, docs/serving.md).

The mechanism, as the C++ executor runs it [S: NVIDIA/TensorRT-LLM
cpp/tensorrt_llm/executor/executorImpl.cpp ``Executor::Impl::forwardAsync``: each iteration
``maxCapacityBatchSize = mModel->getMaxCapacityBatchSize(averageInputLength,
averageOutputLength)``, then ``setRuntimeBatchSize(getRuntimeBatchSize(maxCapacityBatchSize))``;
the averages are a moving window of 128 (``kDefaultDynamicBatchMovingAverageWindow``) over
the active requests' prompt lengths and ``mMaxNewTokens``, cast to integers;
batch_manager/kvCacheManager.cpp ``getMaxCapacityBatchSize``: the primary pool's blocks over
one sequence's blocks for prompt + output;
batch_manager/trtGptModelInflightBatching.cpp ``setRuntimeBatchSize``: ``min(getMaxBatchSize(),
runtimeMaxBatchSize)``; executor/dynamicBatchTuner.cpp ``getRuntimeBatchSize`` and
dynamicBatchTuner.h (``kBatchSizeFallbackGranularity`` 512, ``kBatchSizeFallbackThreshold``
128); executor/dynamicBatchConfig.cpp ``kDefaultBatchSizeTable``]. ``trtllm-bench throughput``
turns it on (tensorrt_llm/bench/benchmark/throughput.py, "Dynamic runtime features.":
``exec_settings["settings_config"]["dynamic_max_batch_size"] = True``; the
``ExecutorSettingsConfig`` default is true too).

The table can round the capacity down (1,624 requests' worth of cache runs at most 1,536) or
up (700 at 768, where the KV admission then binds first). diptych takes the averages as the
requests' mean prompt and output lengths over the whole load (the moving window's value when
every request has the same lengths, as in ``trtllm-bench``'s fixed-length datasets; its
steady state otherwise) [assumption: the window's fluctuation over a length distribution is
not modelled]."""

from __future__ import annotations

#: (capacity limit, batch size): a capacity below the limit runs at that batch size
#: [S] executor/dynamicBatchConfig.cpp ``DynamicBatchConfig::kDefaultBatchSizeTable``
BATCH_SIZE_TABLE = ((144, 128), (336, 256), (672, 512), (832, 768), (1280, 1024),
                    (1664, 1536))
#: [S] executor/dynamicBatchTuner.h
FALLBACK_GRANULARITY = 512
FALLBACK_THRESHOLD = 128


def runtime_batch_size(max_capacity: int) -> int:
    """The batch size TensorRT-LLM's tuner picks for a KV cache that holds ``max_capacity``
    requests of the average lengths (``DynamicBatchTuner::getRuntimeBatchSize``): the table's
    entry for the first limit above it; beyond the table, the capacity rounded down to a
    multiple of 512 when it lies less than 128 above one, else the capacity itself."""
    if max_capacity < 0:
        raise ValueError(f"max_capacity must be >= 0, not {max_capacity}")
    for limit, size in BATCH_SIZE_TABLE:
        if max_capacity < limit:
            return size
    floor = max_capacity // FALLBACK_GRANULARITY * FALLBACK_GRANULARITY
    return floor if max_capacity < floor + FALLBACK_THRESHOLD else max_capacity


def tuned_max_batch(max_batch: int, blocks: int, blocks_per_request: int) -> tuple[int, int]:
    """``(max capacity, runtime max batch)``: how many requests of ``blocks_per_request``
    blocks each the ``blocks`` of the cache hold, and the batch the executor then schedules
    at most, ``min(max_batch, runtime_batch_size(capacity))``."""
    if blocks_per_request < 1:
        raise ValueError(f"blocks_per_request must be >= 1, not {blocks_per_request}")
    capacity = blocks // blocks_per_request
    return capacity, min(max_batch, runtime_batch_size(capacity))
