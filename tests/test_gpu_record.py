"""The stored GPU record that chapters 8 and 9 show without a GPU: loaded, labelled, refused when wrong."""
import json

import pytest

from pagedlib.bench import gpu_record

ROW = dict(batch=8, context=2048, block_size=16, num_splits=1, paged_us=41.25, sdpa_us=38.0,
           ref_us=900.0, paged_gbs=1620.4, sdpa_gbs=1700.0, paged_frac_peak=0.483,
           paged_vs_sdpa=0.921, paged_vs_ref=21.8, max_err=1e-3)


def test_no_record_yet_is_none_and_the_chapters_say_so(tmp_path):
    assert gpu_record.load(tmp_path / "gpu_record.json") is None
    assert "no stored GPU record yet" in gpu_record.MISSING and "gpu_check.sh" in gpu_record.MISSING


def test_a_record_is_labelled_with_gpu_versions_and_date(tmp_path):
    path = tmp_path / "gpu_record.json"
    path.write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "versions": {"torch": "2.9.0",
                                "triton": "3.5.0", "CUDA": "12.8"}, "date": "2026-12-01",
                                "attention": [ROW], "block_size": [ROW]}))
    record = gpu_record.load(path)
    assert gpu_record.label(record) == ("Stored GPU record (scripts/gpu_check.sh), not measured now:\n"
                                        "NVIDIA H100 80GB HBM3, torch 2.9.0, triton 3.5.0, CUDA 12.8, "
                                        "2026-12-01")
    assert all(len(line) <= 88 for line in gpu_record.MISSING.splitlines())
    assert gpu_record.table_rows(record["attention"]) == [
        ["8", "2,048", "16", "1", "41.2", "38.0", "1620", "48%", "0.92x", "21.8x"]]


def test_a_file_that_is_not_a_record_says_how_to_rewrite_it(tmp_path):
    path = tmp_path / "gpu_record.json"
    path.write_text(json.dumps({"gpu": "T4"}))
    with pytest.raises(ValueError, match="no 'versions'.*python -m pagedlib.bench gpu_record"):
        gpu_record.load(path)


def test_measuring_needs_a_gpu():
    from pagedlib import runtime
    if runtime.DEVICE.type == "cuda":
        pytest.skip("this machine has a GPU: scripts/gpu_check.sh measures the record")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        gpu_record.measure()
