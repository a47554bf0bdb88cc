"""Kernel names are parsed (never looked up): seeds' names and names never seen before."""

from __future__ import annotations

import json

import pytest

from tests.conftest import AUDIT_SEED, PROFILE_SEED
from warehouse.modelling.kernel_names import parse

CASES = [
    # (name, short, family, arch, tile, precision)
    ("void cudnn::nchwToNhwcKernel<float, float, float, 0, 1, 0>(cudnn::nchw2nhwc_params_t<T3>, "
     "const T1 *, T2 *)", "cudnn::nchwToNhwcKernel", "cudnn::nchwToNhwcKernel", None, None, "f32"),
    ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_"
     "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
     "sm90_xmma_fprop_implicit_gemm_tf32_128x128x32_segment_k_off", "xmma_fprop_implicit_gemm",
     "sm90", "128x128x32", "tf32"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_"
     "tilesize128x16x64_stage1_warpsize4x1x1_g1_tensor16x8x8_alignc4_execute_kernel__5x_cudnn",
     "sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_tf32_128x16x64",
     "xmma_fprop_implicit_gemm_indexed_wo_smem", "sm80", "128x16x64", "tf32"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(Params)",
     "cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4", "cutlass_tensorop_gemm", "sm80",
     "256x64x16", "tf32"),
    ("void at::elementwise_kernel<128, 2, void at::gpu_kernel_impl_nocast<at::CUDAFunctor_add<"
     "float>>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)",
     "at::elementwise_kernel<CUDAFunctor_add>", "at::elementwise_kernel", None, None, "f32"),
    ("void cask_plugin__5x_cudnn::init_device_workspace_kernel<xmma__5x_cudnn::Warp_specialized_"
     "params_non_template<xmma__5x_cudnn::Grid_constant_params>>(T1, bool)",
     "cask_plugin::init_device_workspace_kernel", "cask_plugin::init_device_workspace_kernel",
     None, None, None),
    # never in the seeds: the same rules still apply
    ("sm86_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x32x64_stage4_"
     "warpsize2x2x1_g1_tensor16x8x16_kernel", "sm86_xmma_dgrad_implicit_gemm_f16_64x32x64",
     "xmma_dgrad_implicit_gemm", "sm86", "64x32x64", "f16"),
    ("cutlass_80_tensorop_h16816gemm_128x256_32x3_tn_align8",
     "cutlass_80_tensorop_h16816gemm_128x256_32x3_tn_align8", "cutlass_tensorop_gemm", "sm80",
     "128x256x32", "f16"),
    ("cutlass_simt_sgemm_128x128_8x2_nn_align1", "cutlass_simt_sgemm_128x128_8x2_nn_align1",
     "cutlass_simt_gemm", None, "128x128x8", "f32"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::Half, "
     "c10::Half, c10::Half, at::native::binary_internal::MulFunctor<float>>, at::detail::Array<"
     "char *, 3>>(int, T2, T3)", "at::native::vectorized_elementwise_kernel<MulFunctor>",
     "at::native::vectorized_elementwise_kernel", None, None, "f16"),
    # tile-machine kernels: the name is already short; family = leading words
    ("gemm_f16_init_large_rows_interleaved_k80_c112_r121_r122",
     "gemm_f16_init_large_rows_interleaved_k80_c112_r121_r122", "gemm", None, None, "f16"),
    ("rearrange_row_major_to_amp_f16_o2_r64_p64_c32_p32_b64x16",
     "rearrange_row_major_to_amp_f16_o2_r64_p64_c32_p32_b64x16", "rearrange_row_major_to_amp",
     None, None, "f16"),
    ("attention_softmax_d72_p768_tail_f8_sm4", "attention_softmax_d72_p768_tail_f8_sm4",
     "attention_softmax", None, None, "f8"),
    ("cast_f16_f8", "cast_f16_f8", "cast", None, None, "f16_f8"),
    ("exchange", "exchange", "exchange", None, None, None),
]


@pytest.mark.parametrize("name,short,family,arch,tile,precision", CASES)
def test_parse(name, short, family, arch, tile, precision):
    k = parse(name)
    assert (k.short, k.family, k.arch, k.tile, k.precision) == (short, family, arch, tile,
                                                                precision)


def test_every_seed_name_parses_to_a_short_name_and_family():
    audit = json.loads(AUDIT_SEED.read_bytes())
    profile = json.loads(PROFILE_SEED.read_bytes())
    names = {k["name"] for r in audit["rows"] for k in r["kernels"]} | {
        g["name"] for g in profile["groups"]}
    for n in names:
        k = parse(n)
        assert k.short and k.family, n
        assert "(" not in k.short and " " not in k.short, (n, k.short)
        assert len(k.short) <= len(n)
    # launches of the same kernel with different template arguments share one short name
    shorts = {parse(n).short for r in audit["rows"] for n in [k["name"] for k in r["kernels"]]}
    assert "cudnn::nchwToNhwcKernel" in shorts
    assert len(shorts) < len({k["name"] for r in audit["rows"] for k in r["kernels"]})


def test_degenerate_names():
    assert parse("").short == ""
    k = parse("void broken<(int")  # unbalanced brackets do not raise
    assert k.short == "broken"


@pytest.mark.parametrize("name", ["<script>alert(1)</script>", "<>", "()", "<img src=x onerror=alert(1)>"])
def test_names_the_grammar_cannot_split_keep_themselves(name):
    # Hostile or odd text from a profiler must never collapse to an empty short name or family:
    # two such kernels would otherwise merge into one row of the marts.
    k = parse(name)
    assert k.short and k.family
    assert parse(name + "x").short != k.short or parse(name + "x").family != k.family
