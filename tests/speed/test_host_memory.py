"""Host RAM: host experts and the input embedding against the machine's RAM; pinned must fit, mmap pages."""

from __future__ import annotations

from dataclasses import replace

from moe_model.llama.slot_plan import Placement
from moe_model.speed.hardware import preset
from moe_model.speed.host_memory import HOST_RESERVE_MIB, REFUSED, STREAMS, host_memory, whole_gib
from moe_model.speed.scenario import Scenario

FLAGS = Scenario().memory_flags


def test_cpu_moe_keeps_every_expert_and_the_input_embedding_in_ram(qwen30b):
    """With the RAM stated (the preset's own 32 GiB is an assumption, never priced: the test below)."""
    mem = host_memory(qwen30b, preset("RTX 3060 12GB").with_changes(ram_gib=32.0), Placement(cpu_moe=True), FLAGS)
    assert mem.experts_mib == qwen30b.expert_bytes_total / 2**20
    assert mem.used_mib == mem.experts_mib + qwen30b.input_bytes / 2**20 + HOST_RESERVE_MIB
    assert mem.fits and mem.verdict.startswith("fits in RAM")


def test_all_experts_on_the_gpu_need_almost_no_ram(qwen30b):
    mem = host_memory(qwen30b, preset("RTX 4090"), Placement(cpu_moe=False, n_cpu_moe=0), FLAGS)
    assert mem.experts_mib == 0 and mem.fits


def test_too_little_ram_does_not_fit_and_says_why_per_load_mode(qwen30b):
    small = preset("RTX 4090").with_changes(ram_gib=8.0)
    mmap = host_memory(qwen30b, small, Placement(cpu_moe=True), FLAGS, "mmap")
    pinned = host_memory(qwen30b, small, Placement(cpu_moe=True), FLAGS, "none")
    assert mmap.state == STREAMS and not mmap.fits and mmap.streams and mmap.runs and "page from disk" in mmap.verdict
    assert pinned.state == REFUSED and not pinned.fits and not pinned.runs and "cannot page out" in pinned.verdict
    assert "fewer layers in host memory" in pinned.verdict


def test_fewer_host_layers_free_ram(qwen30b):
    hw = preset("RTX 4090")
    half = host_memory(qwen30b, hw, Placement(cpu_moe=False, n_cpu_moe=24), FLAGS)
    assert half.experts_mib < host_memory(qwen30b, hw, Placement(cpu_moe=True), FLAGS).experts_mib


def test_every_preset_names_its_ram():
    assert preset("Tesla T4").ram_gib == 32.0 and preset("RTX 4090").ram_gib == 64.0


def test_the_page_cache_misses_what_it_cannot_hold_of_the_experts_the_pool_does_not():
    from moe_model.speed.host_memory import page_miss_share

    assert page_miss_share(128, 0.0, 128.0) == 0.0 and page_miss_share(128, 0.0, 0.0) == 1.0
    assert page_miss_share(128, 0.0, 64.0) == 0.5
    assert page_miss_share(128, 64.0, 32.0) == 0.5  # the pool's experts are not read from the host
    assert page_miss_share(128, 128.0, 0.0) == 0.0


def test_ram_not_stated_is_priced_in_ram_and_says_what_it_needs(qwen30b):
    plain = preset("RTX 3060 12GB")
    hw = plain.with_changes(host=replace(plain.host, ram_gib=8.0, stated=()))  # a figure nobody stated
    mmap = host_memory(qwen30b, hw, Placement(cpu_moe=True), FLAGS, "mmap")
    pinned = host_memory(qwen30b, hw, Placement(cpu_moe=True), FLAGS, "none")
    assert not hw.host.ram_stated and mmap.fits and not mmap.streams and pinned.fits
    need = f"needs {mmap.needed_gib} GiB of host RAM"
    assert mmap.verdict.startswith("RAM not stated") and need in mmap.verdict
    assert f"{mmap.fault_gbs:,.1f} GB/s" in mmap.verdict and "fail to allocate" in pinned.verdict


def test_a_ram_figure_is_whole_gib_rounded_up_everywhere(qwen30b):
    """Issue 37: recommend said '130 GiB of RAM would end it' where the app said '131 GiB' and 'needs 130.2 GiB'."""
    assert whole_gib(130.2 * 1024) == 131 and whole_gib(130 * 1024) == 130 and whole_gib(1) == 1
    hw = preset("3060").with_changes(ram_gib=8.0)
    short = host_memory(qwen30b, hw, Placement(cpu_moe=True), FLAGS, "none")
    assert short.needed_gib == whole_gib(short.used_mib) and short.used_mib / 1024 % 1  # not whole: rounded up
    assert f"needs {short.needed_gib} GiB, the machine has 8 GiB" in short.verdict


def test_mmapd_experts_with_no_room_left_for_the_page_cache_are_refused_and_say_why(qwen30b):
    """--no-kv-offload at a long context fills a small RAM with K and V: nothing is left to page the experts through."""
    hw = preset("RTX 4090").with_changes(ram_gib=4.0)
    flags = Scenario(n_ctx=65536, no_kv_offload=True).memory_flags
    mem = host_memory(qwen30b, hw, Placement(cpu_moe=True), flags, "mmap")
    assert mem.kv_mib == 6144 and mem.page_cache_mib == 0  # 96 KiB per cell (48 layers, f16) x 65,536 cells
    assert mem.state == REFUSED and not mem.runs and "leave no RAM for the page cache" in mem.verdict
