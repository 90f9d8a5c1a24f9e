"""A checkpoint served after its run (issue 37), attacked and used as an ordinary account would, over real HTTP
against daphne with the embedded executor and the tiny model: the `openai` client with a project token gets the
checkpoint's answer (and the project endpoint by `<run>@<step>`); another project's token, a viewer's token, a
smuggled parameter, a checkpoint of another project by name and a recording header are refused, each with its
reason, and nothing of theirs reaches the server."""
from __future__ import annotations

import httpx
import openai
import pytest
from rest_framework.authtoken.models import Token

from tests.webapp.conftest import inprocess_executor  # noqa: F401  (a fixture)
from tests.webapp.factories import member_factory, project_factory
from tests.webapp.serving_world import completed_run, lora_adapters, served_app  # noqa: F401  (fixtures)
from webapp.models import ProjectServer, Role
from webapp.services.project_tokens import project_token_create

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_completed_runs_checkpoint_answers_an_openai_client_with_a_project_token_and_refuses_the_rest(
        served_app, lora_adapters, tiny_model_dir):  # noqa: F811
    project = project_factory()
    run = completed_run(project=project, model_dir=tiny_model_dir, adapters=lora_adapters[:2], max_tokens=12)
    assert run.status == "completed"
    first, second = run.checkpoints.order_by("step_index")
    _, key = project_token_create(user=project.owner, project=project, name="app")
    client = openai.OpenAI(base_url=f"{served_app}/api/checkpoints/{first.pk}/openai/v1", api_key=key,
                           max_retries=0, timeout=180)
    answer = client.chat.completions.create(model="demo@1", messages=[{"role": "user", "content": "Hello"}],
                                            max_tokens=8, temperature=0)
    assert answer.model == "demo@1" and isinstance(answer.choices[0].message.content, str)
    assert not hasattr(answer.choices[0], "token_ids") or answer.choices[0].model_extra.get("token_ids") is None
    again = client.chat.completions.create(messages=[{"role": "user", "content": "Hello"}], max_tokens=8,
                                           temperature=0, model="demo@1")
    assert again.choices[0].message.content == answer.choices[0].message.content  # greedy: the same answer
    server = ProjectServer.objects.get(project=project)
    assert server.status == "ready" and server.startup_s is not None
    listed = client.models.list()
    assert [m.id for m in listed.data] == ["demo@1"]

    project_client = openai.OpenAI(base_url=f"{served_app}/api/projects/{project.pk}/openai/v1", api_key=key,
                                   max_retries=0, timeout=180)
    other = project_client.chat.completions.create(model="demo@2", messages=[{"role": "user", "content": "Hello"}],
                                                   max_tokens=8, temperature=0)
    assert other.model == "demo@2"
    assert sorted(m.id for m in project_client.models.list().data) == ["demo@1", "demo@2"]

    # Another project's token: its own project is ordinary, its token is refused here.
    intruder = project_factory()
    completed_run(project=intruder, model_dir=tiny_model_dir, adapters=lora_adapters[2:], name="demo")
    _, their_key = project_token_create(user=intruder.owner, project=intruder, name="theirs")
    stranger = openai.OpenAI(base_url=f"{served_app}/api/checkpoints/{first.pk}/openai/v1", api_key=their_key,
                             max_retries=0, timeout=60)
    with pytest.raises(openai.NotFoundError, match="no such checkpoint"):  # as for an id that does not exist
        stranger.chat.completions.create(model="demo@1", messages=[{"role": "user", "content": "Hello"}])
    with pytest.raises(openai.NotFoundError, match="no such project"):
        openai.OpenAI(base_url=f"{served_app}/api/projects/{project.pk}/openai/v1", api_key=their_key,
                      max_retries=0).chat.completions.create(model="demo@1", messages=[{"role": "user", "content": "x"}])
    # Their token on their own project cannot reach our checkpoint by its name either: it names their own.
    theirs = openai.OpenAI(base_url=f"{served_app}/api/projects/{intruder.pk}/openai/v1", api_key=their_key,
                           max_retries=0, timeout=180)
    with pytest.raises(openai.BadRequestError, match="no checkpoint named"):
        theirs.chat.completions.create(model="nope@1", messages=[{"role": "user", "content": "x"}])

    # A viewer's own API token: served answers spend the project's server time, editors only.
    viewer = member_factory(project=project, role=Role.VIEWER)
    viewer_key = Token.objects.create(user=viewer).key
    with pytest.raises(openai.PermissionDeniedError):
        openai.OpenAI(base_url=f"{served_app}/api/checkpoints/{first.pk}/openai/v1", api_key=viewer_key,
                      max_retries=0).chat.completions.create(model="demo@1", messages=[{"role": "user", "content": "x"}])

    # The run endpoint's allow-list and limits: a smuggled parameter, too many tokens, a recording header.
    url = f"{served_app}/api/checkpoints/{first.pk}/openai/v1/chat/completions"
    headers = {"Authorization": f"Bearer {key}"}
    for extra, named in (({"logit_bias": {"1": 100}}, "logit_bias"), ({"max_tokens": 13}, "max_tokens"),
                         ({"n": 99}, "n"), ({"temperature": 5}, "temperature"),
                         ({"model": "demo@2"}, "model")):
        refused = httpx.post(url, headers=headers, timeout=60,
                             json={"messages": [{"role": "user", "content": "x"}], **extra})
        assert refused.status_code == 400 and named in refused.json(), (extra, refused.text)
    recorded = httpx.post(url, headers={**headers, "X-Trajectory-Id": "t1"}, timeout=60,
                          json={"messages": [{"role": "user", "content": "x"}]})
    assert recorded.status_code == 400 and "records nothing for training" in recorded.text
    assert httpx.post(url, json={"messages": []}, timeout=60).status_code == 401
