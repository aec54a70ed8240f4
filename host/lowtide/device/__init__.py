"""Measuring on boards: the serial protocol (`protocol`), byte links (`transport`), the host side of a session
(`session`), board launchers (`boards`), the host-tflm board process (`host_tflm`) and `measure`."""

from lowtide.device.measure import Latency, MeasureResult, measure

__all__ = ["Latency", "MeasureResult", "measure"]
