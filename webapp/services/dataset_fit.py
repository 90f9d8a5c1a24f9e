"""Does each uploaded conversation fit the model it will train? Counted at upload with the chosen model's
tokenizer and chat template (training.model.chat_format.conversation_tokens), against the context the deployment's
catalogue gives for it (or its config's): a conversation longer than that cannot be trained by any setting, so it
is refused by its line with the limit and what to do, instead of failing the run later."""
from __future__ import annotations

from typing import Any

from webapp.model_catalogue import BaseModelChoiceError, resolve_base_model

MAX_LISTED = 20  # a file that is too long everywhere is reported by its first lines, not all of them


def conversations_over_context(*, model: str, conversations: list[Any], places: list[str]
                               ) -> tuple[list[str], str]:
    """(problems, one per conversation over the model's context, naming its place: "line 3" of an upload,
    "conversation 3" of a version; a note saying what was checked). A model the web process cannot read (e.g.
    only the workers hold it) is not counted, and the note says so."""
    from training.model.chat_format import conversation_tokens
    from training.model.preflight import model_counter

    try:  # a name of the deployment's catalogue only, never a directory from the form
        resolved = resolve_base_model(model)
    except BaseModelChoiceError as err:
        return [str(err)], ""
    counter, why = model_counter(resolved.source)
    if counter is None:
        return [], f"not counted against {resolved.name}: {why}"
    tokenizer, config_context = counter
    context = resolved.context_length or config_context
    problems = []
    for conversation, place in zip(conversations, places):
        tokens = conversation_tokens(tokenizer, conversation.as_messages(), conversation.tool_list())
        if tokens > context:
            problems.append(f"{place}: the conversation is {tokens:,} tokens, more than the {context:,}-token "
                            f"context of {resolved.name}; shorten it or split it into shorter conversations "
                            "(or check against a model with a longer context)")
            if len(problems) >= MAX_LISTED:
                break
    return problems, f"each within the {context:,}-token context of {resolved.name}"
