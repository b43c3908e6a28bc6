"""The synthetic workload source: one trace, batched once per way a server batches it, the same workload as
synthetic_workload gives, shared safely between threads."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from moe_model.pricing.workloads import SyntheticSource, synthetic_workload, workload_scenario
from moe_model.readers.model_spec import load_model
from moe_model.speed.scenario import Scenario

QWEN30B = "sample_data/models/Qwen3-30B-A3B-Q4_K_M.gguf"


def test_a_source_batches_each_way_once_and_equals_synthetic_workload():
    model = load_model(QWEN30B)
    source = SyntheticSource(model)
    one, four = Scenario(), Scenario(concurrency=4)
    first = source(one)
    assert source(Scenario(budget_mib=1234)) is first  # the budget does not change how a server batches
    alone = synthetic_workload(model, workload_scenario(four))
    shared = source(four)
    assert shared is not first and np.array_equal(shared.ids, alone.ids)
    assert np.array_equal(shared.rec_ntok, alone.rec_ntok)


def test_threads_asking_for_one_batching_get_one_workload():
    source = SyntheticSource(load_model(QWEN30B))
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(source, [Scenario()] * 4))
    assert all(w is got[0] for w in got)
