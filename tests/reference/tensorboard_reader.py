"""Reads TensorBoard event files with the tensorboard package's own loader (which checks the
TFRecord framing and CRCs, parses the Event protos and migrates scalars as TensorBoard does)
and writes every scalar as a line "tag step value" to OUT.

usage: tensorboard_reader.py EVENT_FILE OUT
"""
import sys

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util


def main(path, out_path):
    events = list(EventFileLoader(path).Load())
    assert events and events[0].file_version == "brain.Event:2", events[:1]
    with open(out_path, "w") as out:
        for event in events[1:]:
            for value in event.summary.value:
                # The loader migrates simple_value scalars to the scalars plugin's tensor form,
                # as TensorBoard shows them.
                assert value.metadata.plugin_data.plugin_name == "scalars", value
                out.write(f"{value.tag} {event.step} {tensor_util.make_ndarray(value.tensor).item()!r}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
