"""Every registered export format goes through the same checks: it exports a front point; a folder
format writes its marker among files it names as its own, and knows its files again by their first
lines (so a later export clears them); a printed format writes no file."""

import pytest

from servopt.costmodels import Deployment, get_gpu, get_model
from servopt.costmodels.errors import InputError
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.serving import compile_deployment
from servopt.results import EXPORT_FORMATS, ExportRequest, FrontPoint, get_format

GPU = get_gpu("h100")


@pytest.fixture(scope="module")
def request_of_a_point() -> ExportRequest:
    # Two replicas, so the vLLM scripts have a router and the README is what the export shows.
    compiled = compile_deployment(get_model("llama-3.1-8b"), Deployment(gpu="h100", replicas=2, max_model_len=4096),
                                  GPU, PerformanceProfile.spec_default(GPU))
    record = compiled.record()
    return ExportRequest({"study": "chat"}, FrontPoint(trial=7, serve_id=record.weights.serve_id, deployment=record))


@pytest.mark.parametrize("name", sorted(EXPORT_FORMATS))
def test_the_format_exports_a_point(name, request_of_a_point):
    fmt = get_format(name)
    assert fmt.name == name and fmt.help
    exported = fmt.export(request_of_a_point)
    assert exported.trial == 7 and exported.shown
    if fmt.printed:
        assert not exported.files and fmt.file_names is None and not fmt.heads
        return
    assert fmt.marker in exported.files and exported.executable <= set(exported.files)
    assert all(fmt.file_names.fullmatch(file) for file in exported.files)
    recognised = {file for file, text in exported.files.items()
                  if any((m := head.match(text)) and int(m.group(1)) == 7 for head in fmt.heads)}
    assert fmt.marker in recognised


def test_an_unknown_format_is_refused_in_one_line():
    with pytest.raises(InputError, match=r"^--format: no export format 'pdf'; formats: vllm, kubernetes"):
        get_format("pdf")
