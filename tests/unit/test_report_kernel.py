"""The kernel that ran each variant reaches the report's variant table and MLflow's params, and an
unpacked one is marked: a broken kernel can pass for accuracy loss."""

from __future__ import annotations

from selector.report import fmt
from selector.report.render import build_view, render_markdown
from selector.report.view import kernel_cell
from selector.trackers.naming import record_params
from selector.records import KernelInfo
from tests.fixtures.sample_report import sample_sweep

MARLIN = KernelInfo(backend="gptqmodel", kernel="marlin", linear_class="gptqmodel.nn_modules.qlinear.marlin.MarlinLinear",
                    quantized_layers=210, plain_layers=0, library_kernel="gptq_marlin", dtype="bfloat16",
                    fallbacks=["machete: not tried"])
DENSE = KernelInfo(backend="llmcompressor", kernel="dense", linear_class="torch.nn.modules.linear.Linear",
                   quantized_layers=0, plain_layers=210, unpacked=True, dtype="bfloat16")


def with_kernels():  # type: ignore[no-untyped-def]
    records, selection, context = sample_sweep()
    done = [r for r in records if r.status == "completed"]
    done[0].kernel, done[1].kernel = MARLIN, DENSE
    return records, selection, context, done


def test_the_variant_table_has_a_kernel_column_and_marks_unpacked() -> None:
    records, selection, context, done = with_kernels()
    table = build_view(records, selection, context, with_plots=False)["variants"]
    col = table.columns.index("kernel")
    cells = {row[0].text: row[col] for row in table.rows}
    marlin, dense = cells[done[0].name], cells[done[1].name]
    assert marlin.text == "marlin (MarlinLinear)" and marlin.sub == "gptq_marlin" and "below" not in marlin.kind
    assert "210 quantized, 0 plain" in marlin.title and "passed over: machete: not tried" in marlin.title
    assert dense.text == "dense (Linear) unpacked" and dense.kind == "below"
    assert (cells[done[2].name].text, cells[done[2].name].kind) == (fmt.DASH, "muted")
    assert "dense (Linear) unpacked" in render_markdown(build_view(records, selection, context, with_plots=False))


def test_no_kernel_column_for_records_without_one() -> None:
    records, selection, context = sample_sweep()
    assert "kernel" not in build_view(records, selection, context, with_plots=False)["variants"].columns


def test_kernel_params_for_mlflow() -> None:
    _, _, _, done = with_kernels()
    params = record_params(done[1])
    assert params["kernel"] == "dense" and params["kernel.unpacked"] == "True"
    assert params["kernel.linear_class"] == "torch.nn.modules.linear.Linear"
    assert (params["kernel.quantized_layers"], params["kernel.plain_layers"]) == ("0", "210")
    assert record_params(done[0])["kernel.library_kernel"] == "gptq_marlin"
    assert "kernel" not in record_params(done[2])


def test_kernel_cell_names_a_weight_subclass() -> None:
    _, _, _, done = with_kernels()
    done[0].kernel = KernelInfo(backend="torchao", kernel="torchao-int8_weight_only", quantized_layers=7,
                                linear_class="torch.nn.modules.linear.Linear", weight_class="torchao.quantization.Int8Tensor")
    cell = kernel_cell(done[0])
    assert cell.text == "torchao-int8_weight_only (Int8Tensor)" and "weights held as torchao" in cell.title
