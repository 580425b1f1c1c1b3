"""rewardseal-mockmed-tools: the verifiers 0.4 plugin id of the multi-turn MockMed tool taskset.

verifiers imports a taskset (and its default harness) by id, dashes to underscores; this package
only re-exports :mod:`rewardseal_mockmed_extradup.tools_environment`, where the taskset lives.
"""

from __future__ import annotations

from rewardseal_mockmed_extradup.tools_environment import (
    TOOLS_ENV_ID,
    ToolCallingHarness,
    ToolCallingHarnessConfig,
    ToolsData,
    ToolsTask,
    ToolsTaskset,
    ToolsTasksetConfig,
    tools_env_config,
)

__all__ = [
    "TOOLS_ENV_ID",
    "ToolCallingHarness",
    "ToolCallingHarnessConfig",
    "ToolsData",
    "ToolsTask",
    "ToolsTaskset",
    "ToolsTasksetConfig",
    "tools_env_config",
]
