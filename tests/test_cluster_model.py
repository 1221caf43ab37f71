"""The cluster cost model (reports/cluster_model.py) against hand computations, and its paper-scale
workload against config/paper.yaml."""

import math

import pytest

from core.config import REPO
from jobs.validation import load
from reports import cluster_model as cm

IB = cm.Link(bandwidth=25e9, latency=5e-6)


def test_ring_allreduce_by_hand():
    # S = 64 GB (32B params in bf16) over 16 GPUs: 2 x 15/16 x 64e9 / 25e9 = 4.8 s, + 30 x 5 us.
    assert cm.ring_allreduce_seconds(64e9, 16, IB) == pytest.approx(4.8 + 150e-6, rel=1e-12)
    assert cm.ring_allreduce_seconds(64e9, 2, IB) == pytest.approx(64e9 / 25e9 + 10e-6, rel=1e-12)
    assert cm.ring_allreduce_seconds(64e9, 1, IB) == 0.0


def test_es_step_by_hand():
    # N = 30 members on 4 workers: ceil(7.5) = 8 members of 2 s, 0.5 s update, 8 messages of 5 us,
    # 1.2 MB + 120 B through 25 GB/s.
    expected = 8 * 2.0 + 0.5 + 8 * 5e-6 + (1.2e6 + 120) / 25e9
    assert cm.es_step_seconds(30, 4, 2.0, 0.5, 1.2e6, 120, IB) == pytest.approx(expected, rel=1e-12)
    assert cm.es_step_seconds(30, 30, 2.0, 0.0, 0, 0, IB) == pytest.approx(2.0 + 60 * 5e-6)


def test_grpo_step_by_hand():
    # 512 rollouts on 16 GPUs: 32 each of 0.3 s + 0.8 s, then the all-reduce above.
    expected = 32 * 1.1 + 4.8 + 150e-6
    assert cm.grpo_step_seconds(512, 16, 0.3, 0.8, 64e9, IB) == pytest.approx(expected, rel=1e-12)


def test_es_rollouts_per_worker_splits_a_member_only_beyond_one_gpu_each():
    assert cm.es_rollouts_per_worker(30, 32, 1) == 960
    assert cm.es_rollouts_per_worker(30, 32, 16) == 2 * 32
    assert cm.es_rollouts_per_worker(32, 32, 128) == 8  # 4 GPUs per member, 8 problems each
    assert cm.es_rollouts_per_worker(30, 32, 128) == 8  # 128 // 30 = 4


def test_speedup_at_one_gpu_is_the_compute_ratio():
    """On one GPU only compute counts: GRPO's rollout plus its loss passes over ESSA's rollout."""
    cluster, work, model = cm.Cluster(), cm.Workload(), cm.MODELS[2]
    rollout = work.new_tokens / cluster.rollout_utilisation
    train = 4 * (work.prompt_tokens + work.new_tokens) / cluster.train_utilisation
    assert cm.speedup(model, 1) == pytest.approx((rollout + train) / rollout, rel=1e-4)
    curve = cm.speedups()[model.name]
    assert curve[cm.GPUS.index(128)] > curve[cm.GPUS.index(16)] > curve[0], "the all-reduce grows GRPO's share"


def test_the_32b_model_and_essa_population():
    model = cm.MODELS[2]
    assert model.essa_dimension == 64 * 7 * 2 * 16 == 14336
    assert model.essa_population == 4 + math.floor(3 * math.log(14336)) == 32


def test_workload_is_paper_scale():
    paper = load(REPO / "config" / "paper.yaml")
    work = cm.Workload()
    essa, grpo = paper.methods["essa"], paper.methods["grpo"]
    assert (work.essa_batch, work.grpo_prompts, work.grpo_group) == (essa.batch_size, grpo.prompts_per_step,
                                                                     grpo.num_generations)
    assert essa.population_size is None and grpo.lora_rank == 0 and grpo.gradient_checkpointing and grpo.beta == 0
    assert essa.lora_rank == cm.MODELS[0].lora_rank and len(essa.target_modules) == cm.MODELS[0].adapted_per_layer
    assert work.new_tokens == paper.training.max_new_tokens
