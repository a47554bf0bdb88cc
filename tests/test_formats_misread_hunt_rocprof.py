"""rocprofv3 / rocpd CSVs that are no kernel dispatch list are never read as kernels.

Headers as rocprofiler-sdk writes them: ROCm/rocprofiler-sdk ``source/lib/output/generateCSV.cpp``
(rocprofv3: ``agent_info``, ``counter_collection``, ``memory_allocation_trace``,
``scratch_memory_trace``, PC sampling) and ``source/lib/python/rocpd/source/csv.cpp`` (the rocpd
CSV conversion of ROCm 7: a ``Guid`` column first, a ``Pid`` first in ``counter_collection``), and
``source/lib/python/rocpd/summary.py`` (``rocpd summary``: ``Name``, ``Calls``,
``DURATION (nsec)``, …). Rows are made up, in those layouts. ``counter_collection_stats.csv`` is
never written: ``generateStats.cpp`` returns no entries for counter records.
"""

from __future__ import annotations

import pytest

from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.formats import rocprof_csv

AGENT_COLS = ("Node_Id,Logical_Node_Id,Agent_Type,Cpu_Cores_Count,Simd_Count,Cpu_Core_Id_Base,"
              "Simd_Id_Base,Max_Waves_Per_Simd,Lds_Size_In_Kb,Gds_Size_In_Kb,Num_Gws,"
              "Wave_Front_Size,Num_Xcc,Cu_Count,Array_Count,Num_Shader_Banks,"
              "Simd_Arrays_Per_Engine,Cu_Per_Simd_Array,Simd_Per_Cu,Max_Slots_Scratch_Cu,"
              "Gfx_Target_Version,Vendor_Id,Device_Id,Location_Id,Domain,Drm_Render_Minor,"
              "Num_Sdma_Engines,Num_Sdma_Xgmi_Engines,Num_Sdma_Queues_Per_Engine,Num_Cp_Queues,"
              "Max_Engine_Clk_Ccompute,Max_Engine_Clk_Fcompute,Sdma_Fw_Version,Fw_Version,"
              "Capability,Cu_Per_Engine,Max_Waves_Per_Cu,Family_Id,Workgroup_Max_Size,"
              "Grid_Max_Size,Local_Mem_Size,Hive_Id,Gpu_Id,Workgroup_Max_Dim_X,"
              "Workgroup_Max_Dim_Y,Workgroup_Max_Dim_Z,Grid_Max_Dim_X,Grid_Max_Dim_Y,"
              "Grid_Max_Dim_Z,Name,Vendor_Name,Product_Name,Model_Name")
AGENT_INFO = AGENT_COLS + "\n" + ",".join(["1"] * 49 + ["gfx90a", "AMD", "MI210", "x"]) + "\n"
COUNTER_SDK = ("Correlation_Id,Dispatch_Id,Agent_Id,Queue_Id,Process_Id,Thread_Id,Grid_Size,"
               "Kernel_Id,Kernel_Name,Workgroup_Size,LDS_Block_Size,Scratch_Size,VGPR_Count,"
               "Accum_VGPR_Count,SGPR_Count,Counter_Name,Counter_Value,Start_Timestamp,"
               "End_Timestamp\n"
               "1,1,Agent 2,1,9,9,256,3,k,64,0,0,8,0,16,SQ_WAVES,4,100,200\n"
               "1,1,Agent 2,1,9,9,256,3,k,64,0,0,8,0,16,GRBM_COUNT,90,100,200\n")
COUNTER_ROCPD = "Pid," + COUNTER_SDK.replace("\n1,1,", "\n9,1,1,")
MEM_ALLOC = ("Kind,Operation,Agent_Id,Allocation_Size,Address,Correlation_Id,Start_Timestamp,"
             "End_Timestamp\n"
             "MEMORY_ALLOCATION,MEMORY_ALLOCATION_ALLOCATE,Agent 2,1024,0x0000000000001000,1,"
             "100,200\n")
SCRATCH = ("Kind,Operation,Agent_Id,Queue_Id,Thread_Id,Alloc_Flags,Start_Timestamp,"
           "End_Timestamp\n"
           "SCRATCH_MEMORY,SCRATCH_MEMORY_ALLOC,Agent 2,1,9,0,100,200\n")
PC_SAMPLING = ("Sample_Timestamp,Exec_Mask,Dispatch_Id,Instruction,Instruction_Comment,"
               "Correlation_Id\n100,1,1,s_nop 0,,1\n")
ROCPD_SUMMARY = ('Name,Calls,"DURATION (nsec)","AVERAGE (nsec)","PERCENT (INC)","MIN (nsec)",'
                 '"MAX (nsec)",STD_DEV\nk,2,300,150.0,100.0,100,200,70.7\n')
ROCPD_KERNEL_TRACE = ('"Guid","Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id",'
                      '"Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp",'
                      '"End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count",'
                      '"Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X","Workgroup_Size_Y",'
                      '"Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
                      '"g","KERNEL_DISPATCH","Agent 2",1,0,9,1,3,"k",1,100,200,0,0,8,0,16,64,1,1,'
                      '256,1,1\n')


def _outcome(text: str, name: str) -> str:
    """``refused: <why>`` or the reader and event kinds it stored."""
    try:
        mod, payload = formats.detect_payload(text.encode(), name)
        parsed = mod.parse(payload, name, "r1")
    except FormatError as e:
        return f"refused: {e}"
    kinds = []
    if "trace_events" in parsed.tables:
        kinds = parsed.tables["trace_events"].column("kind").to_pylist()
    return f"read by {mod.NAME}: {sorted(set(kinds))}"


@pytest.mark.parametrize("text,name", [
    (AGENT_INFO, "agent_info.csv"),
    (MEM_ALLOC, "memory_allocation_trace.csv"),
    (SCRATCH, "scratch_memory_trace.csv"),
    (PC_SAMPLING, "pc_sampling_host_trap.csv"),
    (ROCPD_SUMMARY, "KERNEL_DISPATCH_summary.csv"),
])
def test_no_kernels_are_read_from(text, name):
    assert _outcome(text, name).startswith("refused: ")


@pytest.mark.parametrize("text", [COUNTER_SDK, COUNTER_ROCPD])
def test_counter_collection_is_refused_as_long_form_not_counted_per_counter(text):
    with pytest.raises(FormatError, match="counter collection in long form"):
        rocprof_csv.parse(text.encode(), "counter_collection.csv", "r1")


def test_rocpd_kernel_trace_is_read_as_one_dispatch_per_row():
    out = _outcome(ROCPD_KERNEL_TRACE, "kernel_trace.csv")
    assert out == "read by rocprof_csv: ['kernel']"
