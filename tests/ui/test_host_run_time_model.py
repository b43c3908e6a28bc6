"""The app's CPU run carries the error left out of a fit with a host record, unless the machine's own logs calibrated
it."""

from __future__ import annotations

from moe_model.fits.calibration import default_time_model
from moe_model.fits.host_fit import host_time_model
from moe_model.readers.llama_bench import read_host_input
from tests.readers.test_host_record import RECORD
from ui.host_run import time_model_with


def test_a_cpu_run_takes_the_host_record_error_unless_the_machine_is_calibrated():
    plain, given = default_time_model(), read_host_input(RECORD.to_json().encode())
    assert time_model_with(plain, None, calibrated=False) is plain
    assert time_model_with(plain, given, calibrated=True) is plain
    assert time_model_with(plain, given, calibrated=False).rel_error == host_time_model().rel_error != plain.rel_error
