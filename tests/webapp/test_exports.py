"""A checkpoint's merged export from the run page (issue 37): an editor asks for it, a worker (the embedded
executor) merges it with progress on the row, the model card says what it was trained from, and the download is
a zip of safetensors, tokenizer and card. A viewer cannot ask; a stranger does not see it."""
from __future__ import annotations

import io
import zipfile

import pytest
from django.urls import reverse

from tests.webapp.conftest import wait_for
from tests.webapp.factories import member_factory, project_factory, rubric_factory
from tests.webapp.serving_world import completed_run, lora_adapters  # noqa: F401  (fixture)
from webapp.models import ModelExport, Role

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_editor_exports_a_checkpoint_merged_with_its_model_card_and_downloads_it(
        inprocess_executor, lora_adapters, tiny_model_dir, client):  # noqa: F811
    project = project_factory(name="Export project")
    run = completed_run(project=project, model_dir=tiny_model_dir, adapters=lora_adapters[:1])
    rubric = rubric_factory(project=project, text="Prefer legal moves.")
    run.rubric_version = rubric.latest_version
    run.save(update_fields=["rubric_version"])
    checkpoint = run.checkpoints.get()
    viewer = member_factory(project=project, role=Role.VIEWER)
    client.force_login(viewer)
    assert client.post(reverse("checkpoint-export", args=[checkpoint.pk])).status_code == 403
    client.force_login(project_factory().owner)
    assert client.post(reverse("checkpoint-export", args=[checkpoint.pk])).status_code == 404
    assert not ModelExport.objects.exists()

    client.force_login(project.owner)
    response = client.post(reverse("checkpoint-export", args=[checkpoint.pk]))
    assert response.status_code == 302
    export = ModelExport.objects.get(checkpoint=checkpoint)
    done = wait_for(lambda: ModelExport.objects.filter(pk=export.pk, status__in=["done", "failed"]).first(),
                    timeout=240, message="the export")
    assert done.status == "done", done.error
    assert done.progress == 1.0 and done.phase == "done"
    page = client.get(reverse("export-detail", args=[export.pk])).content.decode()
    assert "hx-trigger" not in page and 'id="export-download"' in page
    download = client.get(reverse("export-download", args=[export.pk]))
    assert download.status_code == 200
    names = zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content))).namelist()
    assert "model.safetensors" in names and "tokenizer_config.json" in names and "README.md" in names
    assert not any(n.startswith("adapter_") for n in names)
    card = zipfile.ZipFile(io.BytesIO(b"".join(client.get(reverse("export-download", args=[export.pk]))
                                               .streaming_content))).read("README.md").decode()
    assert str(tiny_model_dir) in card and "demo@1" in card and "Prefer legal moves." in card
    assert "held-out win rate | not evaluated" in card and "training scenarios" in card
    client.force_login(viewer)  # a viewer may download what an editor exported, as the adapter zip
    assert client.get(reverse("export-download", args=[export.pk])).status_code == 200
