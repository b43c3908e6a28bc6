"""Every term a page or command names has plain words (speed.term_words): a calibration's fitted terms too."""

from __future__ import annotations

from moe_model.fits.machine_fit import FITTED_TERMS, MachineFit
from moe_model.speed.hardware import preset
from moe_model.speed.term_words import MACHINE_TERM_WORDS


def test_every_term_a_calibration_fits_has_words_and_is_said_in_them():
    assert set(MACHINE_TERM_WORDS) == set(FITTED_TERMS)
    fit = MachineFit(preset("H200"), ("cpu_expert_gbs", "pageable_gbs", "sync_us"), {}, {}, (), 0.1, True, "ok", "mmap")
    assert fit.fitted_words == "the CPU's expert rate, the upload rate, the per-step sync time of each cached layer"
