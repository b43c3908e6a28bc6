"""llama.cpp's buffer names said in words (readers.buffer_words), and parse-log's text says them so."""

from __future__ import annotations

from cli_runs import run_cli

from moe_model.readers.buffer_words import buffer_place, buffer_words
from moe_model.resources import data_path


def test_each_logged_buffer_name_is_said_as_where_it_lives():
    assert buffer_place("CPU_Mapped") == "RAM (mapped from the file)"
    assert buffer_place("CUDA_Host") == "pinned RAM (CUDA_Host)"
    assert buffer_place("CUDA1") == "GPU 1 (CUDA1)" and buffer_place("Vulkan0") == "GPU 0 (Vulkan0)"
    assert buffer_place("Odd_Buffer") == "Odd_Buffer"  # one this tool does not know: as logged


def test_buffers_read_as_places_and_mib():
    assert buffer_words({"CPU_Mapped": 17032.45, "CUDA0": 321.77}) == (
        "RAM (mapped from the file) 17,032 MiB, GPU 0 (CUDA0) 322 MiB"
    )


def test_parse_log_prints_the_buffers_in_words_not_as_a_dictionary():
    out = run_cli("parse-log", str(data_path("groundtruth", "run5", "logs", "server_mm_b25.log")))
    assert out.returncode == 0, out.stderr
    assert "model weights: RAM (mapped from the file) 8,676 MiB, GPU 0 (CUDA0) 322 MiB" in out.stdout
    assert "{'" not in out.stdout and "buffers {" not in out.stdout
