"""CPU provenance: vendor, model and SIMD level (they decide how framework kernels round), and
drift's information line when a reference recorded on one CPU family is replayed on another."""

from __future__ import annotations

import json

import pytest
from spec_helpers import make_project

from paritygate import provenance
from paritygate.cli import main
from paritygate.drift import verify
from paritygate.references import manifest_digest, record
from paritygate.spec import load_spec

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Platinum 8592+
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512dq avx512cd \
avx512bw avx512vl avx_vnni avx512_bf16 avx512_vnni avx512_fp16 amx_bf16 amx_tile amx_int8

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8592+
"""
EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 sha_ni
"""
GRAVITON = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp sve bf16 i8mm
CPU implementer\t: 0x41
CPU architecture: 8
"""


def test_proc_cpuinfo_gives_vendor_model_and_simd_level():
    intel = provenance._parse_cpuinfo(XEON)
    assert intel["vendor"] == "Intel" and intel["model"] == "Intel(R) Xeon(R) Platinum 8592+"
    assert intel["isa"] == "avx512"
    assert {"avx2", "avx512f", "amx_tile", "avx512_bf16"} <= set(intel["features"])
    amd = provenance._parse_cpuinfo(EPYC)
    assert (amd["vendor"], amd["model"], amd["isa"]) == ("AMD", "AMD EPYC 7B13", "avx2")
    assert "avx512f" not in amd["features"]
    arm = provenance._parse_cpuinfo(GRAVITON)
    assert (arm["vendor"], arm["isa"]) == ("Arm", "sve")
    assert {"asimd", "sve", "bf16", "i8mm"} <= set(arm["features"])


def test_sysctl_on_macos_gives_the_same_facts():
    apple = provenance._parse_sysctl(
        "machdep.cpu.brand_string: Apple M2 Max\nhw.optional.arm64: 1\n"
        "hw.optional.arm.FEAT_BF16: 1\nhw.optional.arm.FEAT_SME: 0\n"
    )
    assert apple == {"vendor": "Apple", "model": "Apple M2 Max", "isa": "neon",
                     "features": ["asimd", "bf16"]}  # fmt: skip
    intel = provenance._parse_sysctl(
        "machdep.cpu.brand_string: Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz\n"
        "machdep.cpu.vendor: GenuineIntel\nhw.optional.avx1_0: 1\nhw.optional.avx2_0: 1\n"
        "hw.optional.fma: 1\nhw.optional.avx512f: 0\n"
    )
    assert (intel["vendor"], intel["isa"]) == ("Intel", "avx2")


def test_unknown_platform_falls_back_to_the_processor_string(monkeypatch):
    monkeypatch.setattr(provenance.platform, "system", lambda: "Windows")
    monkeypatch.setattr(
        provenance.platform, "processor", lambda: "AMD64 Family 25 Model 1, AuthenticAMD"
    )
    facts = provenance._read_cpu()
    assert facts["model"] == "AMD64 Family 25 Model 1, AuthenticAMD"
    assert facts["vendor"] == "AMD" and facts["isa"] is None


def test_this_machine_is_described_and_recorded_with_every_reference(tmp_path):
    facts = provenance.cpu_facts()
    assert facts["model"] and facts["vendor"]
    assert provenance.machine_facts()["cpu"] == facts["model"]
    # numpy is always loaded by paritygate: its dispatch level is read without importing more.
    assert facts["dispatch"].get("numpy")
    path = make_project(tmp_path)
    record(load_spec(path))
    manifest = json.loads((tmp_path / "references" / "manifest.json").read_text())
    recorded = manifest["provenance"]
    assert recorded["cpu"] == facts["model"]
    assert recorded["cpu_info"]["vendor"] == facts["vendor"]
    assert recorded["cpu_info"]["isa"] == facts["isa"]


AMD_FACTS = {"vendor": "AMD", "model": "AMD EPYC 7B13", "isa": "avx2", "features": ["avx2"]}
INTEL_FACTS = {
    "vendor": "Intel",
    "model": "Intel(R) Xeon(R) Platinum 8592+",
    "isa": "avx512",
    "features": ["avx2", "avx512f"],
}


def _recorded_on(tmp_path, monkeypatch, facts: dict | None, model: str | None = None):
    """A project whose reference says it was recorded on ``facts`` (None: no CPU fields, as
    references written before CPU provenance), verified on a machine faked as the other. The
    machine's own dispatch variables (a CI image may set OPENBLAS_CORETYPE) are unset: the
    tests that force one set it themselves."""
    for var in provenance.DISPATCH_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    path = make_project(tmp_path)
    record(load_spec(path))
    manifest_path = tmp_path / "references" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["provenance"].pop("cpu_info", None)
    if facts is None:
        if model is None:
            manifest["provenance"].pop("cpu", None)
        else:
            manifest["provenance"]["cpu"] = model
    else:
        manifest["provenance"]["cpu"] = facts["model"]
        manifest["provenance"]["cpu_info"] = {**facts, "dispatch": {}}
    manifest["digest"] = manifest_digest(manifest)
    manifest_path.write_text(json.dumps(manifest))
    return path


def _running_on(monkeypatch, facts):
    monkeypatch.setattr(provenance, "_CPU", dict(facts))
    monkeypatch.setattr(provenance, "_FACTS", None)


@pytest.mark.parametrize(
    ("recorded", "running", "expected"),
    [
        (AMD_FACTS, INTEL_FACTS, "recorded on AMD EPYC 7B13 (avx2), running on "
         "Intel(R) Xeon(R) Platinum 8592+ (avx512)"),
        (INTEL_FACTS, AMD_FACTS, "recorded on Intel(R) Xeon(R) Platinum 8592+ (avx512), "
         "running on AMD EPYC 7B13 (avx2)"),
    ],
)  # fmt: skip
def test_another_cpu_family_is_information_not_drift(
    tmp_path, monkeypatch, capsys, recorded, running, expected
):
    path = _recorded_on(tmp_path, monkeypatch, recorded)
    _running_on(monkeypatch, running)
    result = verify(load_spec(path))
    assert result.passed and result.exit_code == 0 and result.drift == []
    (line,) = [line for line in result.info if line.startswith("cpu:")]
    assert line.startswith(f"cpu: {expected} (not pinned")
    assert main(["verify", str(path)]) == 0
    assert expected in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")


def test_the_same_cpu_says_nothing(tmp_path, monkeypatch):
    path = _recorded_on(tmp_path, monkeypatch, AMD_FACTS)
    _running_on(monkeypatch, AMD_FACTS)
    assert not [line for line in verify(load_spec(path)).info if line.startswith("cpu")]
    # The same model with another SIMD level (an AVX-512 part of the same name, say) is named.
    _running_on(monkeypatch, {**AMD_FACTS, "isa": "avx512"})
    (line,) = [line for line in verify(load_spec(path)).info if line.startswith("cpu:")]
    assert "recorded on AMD EPYC 7B13 (avx2), running on AMD EPYC 7B13 (avx512)" in line


def test_references_from_before_cpu_provenance_still_load(tmp_path, monkeypatch):
    path = _recorded_on(tmp_path, monkeypatch, None)
    _running_on(monkeypatch, INTEL_FACTS)
    result = verify(load_spec(path))
    assert result.passed and result.reference is not None
    (line,) = [line for line in result.info if line.startswith("cpu:")]
    assert line.startswith("cpu: recorded CPU unknown")
    assert "running on Intel(R) Xeon(R) Platinum 8592+ (avx512)" in line
    # A model name without vendor and SIMD level (what references held before): named as such.
    path = _recorded_on(tmp_path / "named", monkeypatch, None, model="AMD EPYC")
    (line,) = [line for line in verify(load_spec(path)).info if line.startswith("cpu:")]
    assert "recorded on AMD EPYC (vendor and instruction set not recorded), running on" in line
    _running_on(monkeypatch, {**AMD_FACTS, "model": "AMD EPYC"})
    assert not [line for line in verify(load_spec(path)).info if line.startswith("cpu")]


def test_a_forced_kernel_dispatch_is_named(tmp_path, monkeypatch):
    path = _recorded_on(tmp_path, monkeypatch, AMD_FACTS)
    _running_on(monkeypatch, AMD_FACTS)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    result = verify(load_spec(path))
    assert result.passed
    assert "cpu dispatch: recorded ATEN_CPU_CAPABILITY None; now ATEN_CPU_CAPABILITY default " \
        "(not pinned)" in result.info  # fmt: skip
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    assert not [line for line in verify(load_spec(path)).info if line.startswith("cpu")]


def test_the_gate_names_both_cpus_in_its_output(tmp_path, monkeypatch, capsys):
    path = _recorded_on(tmp_path, monkeypatch, AMD_FACTS)
    _running_on(monkeypatch, INTEL_FACTS)
    assert main(["gate", str(path)]) == 0  # information: the exit code is unchanged
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "info: cpu: recorded on AMD EPYC 7B13 (avx2), running on Intel(R) Xeon(R) Platinum "
        "8592+ (avx512)" in out
    )
    _running_on(monkeypatch, AMD_FACTS)
    assert main(["gate", str(path)]) == 0
    assert "info: cpu:" not in capsys.readouterr().out
