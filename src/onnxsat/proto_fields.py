"""Rebuilding a protobuf message around the fields that change, without copying those fields first."""

from __future__ import annotations

from google.protobuf.message import Message


def copy_fields(source: Message, target: Message, skip: set[str]) -> None:
    """Copy every set field of ``source`` into ``target`` except those named in ``skip``.

    ``CopyFrom`` and then clearing would copy a model's weights only to drop them: hundreds of MB.
    """
    for descriptor, value in source.ListFields():
        if descriptor.name in skip:
            continue
        field_value = getattr(target, descriptor.name)
        if descriptor.is_repeated:
            field_value.extend(value)
        elif descriptor.message_type is not None:
            field_value.CopyFrom(value)
        else:
            setattr(target, descriptor.name, value)
