"""Testing fluvial topologies without a broker: :class:`TopologyTestDriver`."""

from fluvial.testing.driver import TopologyTestDriver
from fluvial.testing.topics import TestInputTopic, TestOutputTopic
from fluvial.testing.views import ReadOnlyWindowStore

__all__ = ["ReadOnlyWindowStore", "TestInputTopic", "TestOutputTopic", "TopologyTestDriver"]
