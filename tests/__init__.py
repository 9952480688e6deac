"""Tests for the XiaoZhi integration and its device simulator."""
