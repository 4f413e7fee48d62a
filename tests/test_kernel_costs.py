"""The arithmetic of the page "What a GPU kernel costs", and the page's numbers are those computed."""
from pathlib import Path

from pagedlib.attention.kernels import costs
from pagedlib.attention.kernels.launch import SM_LIMITS
from pagedlib.plots.kernels import GPU_SPECS, ridge_point

PAGE = Path(__file__).resolve().parent.parent / "book" / "kernel-costs.md"


def test_coalesced_loads_use_every_byte_strided_ones_a_sector_each():
    assert costs.sectors(2, 1) == 2 and costs.load_efficiency(2, 1) == 1.0
    assert costs.sectors(2, 128) == 32 and costs.load_efficiency(2, 128) == 0.0625
    assert costs.sectors(4, 1) == 4 and costs.sectors(1, 1) == 1


def test_littles_law():
    assert round(costs.bytes_in_flight(1000, 500)) == 500_000          # 1,000 GB/s x 500 ns
    assert round(costs.bytes_in_flight(GPU_SPECS["H100 SXM"]["dram_gbs"]) / 1e6, 1) == 2.0


def test_occupancy_names_the_limit():
    h100 = SM_LIMITS[90]
    assert costs.programs_per_sm(h100, 4, 64) == (8, "registers") and costs.occupancy(h100, 4, 64) == 0.5
    assert costs.programs_per_sm(h100, 4, 32) == (16, "warps")
    assert costs.programs_per_sm(h100, 4, 64, 64 * 1024) == (3, "shared memory")


def test_waves_and_their_last_round():
    assert costs.waves(32, 132) == (1, 32 / 132)
    assert costs.waves(133, 132) == (2, 133 / 264) and costs.waves(264, 132) == (2, 1.0)


def test_gemm_intensity_grows_with_the_batch_attention_stays_flat():
    gemm = [costs.gemm_intensity(m, 4096, 4096) for m in (1, 64, 256)]
    assert gemm == sorted(gemm) and gemm[-1] > 200 * gemm[0]
    assert {costs.decode_attention_intensity(b, 4) for b in (1, 8, 1024)} == {4.0}


def test_the_page_quotes_the_computed_numbers():
    text = " ".join(PAGE.read_text().split())
    h100, t4 = GPU_SPECS["H100 SXM"], GPU_SPECS["T4"]
    assert f"assume {costs.ASSUMED_DRAM_LATENCY_NS} ns" in text
    assert f"touches {costs.sectors(2, 1)} sectors" in text
    assert f"{costs.sectors(2, 128)} sectors, {costs.sectors(2, 128) * 32:,} bytes moved" in text
    assert f"efficiency of {costs.load_efficiency(2, 128):.1%}" in text
    flight_h100 = costs.bytes_in_flight(h100["dram_gbs"])
    flight_t4 = costs.bytes_in_flight(t4["dram_gbs"])
    assert f"({h100['dram_gbs']:,.0f} GB/s) that is about {flight_h100 / 1e6:.1f} MB in flight, " \
           f"{flight_h100 / h100['sms'] / 1e3:.0f} KB per SM" in text    # decimal KB throughout
    assert f"({t4['dram_gbs']:,.0f} GB/s) about {flight_t4 / 1e3:.0f} KB, " \
           f"{flight_t4 / t4['sms'] / 1e3:.1f} KB per SM" in text
    sm = SM_LIMITS[90]
    assert f"{sm.registers:,} registers and room for {sm.max_warps} warps" in text
    n64, _ = costs.programs_per_sm(sm, 4, 64)
    assert f"{n64} programs fit, {n64 * 4} warps, an **occupancy** of {costs.occupancy(sm, 4, 64):.0%}" in text
    assert f"only {costs.programs_per_sm(sm, 4, 128)[0]} fit ({costs.occupancy(sm, 4, 128):.0%})" in text
    assert f"per program, {costs.programs_per_sm(sm, 4, 64, 64 * 1024)[0]}." in text
    assert f"{h100['sms']:.0f} SMs one wave keeps {costs.waves(32, h100['sms'])[1]:.0%}" in text
    assert f"{costs.waves(133, 132)[1]:.0%} of the slots busy" in text
    g = [costs.gemm_intensity(m, 4096, 4096) for m in (1, 64, 256)]
    assert f"about {g[0]:.0f} for one token, {g[1]:.0f} for 64 tokens, {g[2]:.0f} for 256" in text
    assert f"stays at {costs.decode_attention_intensity(1, 4):.0f} FLOPs per byte" in text
    assert f"the {ridge_point('H100 SXM'):.0f} FLOPs per byte" in text
