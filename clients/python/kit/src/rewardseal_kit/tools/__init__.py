"""Agent tools over the synthetic systems of record, written once for every trainer integration.

* :mod:`rewardseal_kit.tools.base`: :class:`~rewardseal_kit.tools.base.Tool` (an
  :class:`rewardseal.trainers.tools.AgentTool`), :class:`~rewardseal_kit.tools.base.ToolSession`
  (one episode's identity, URL and token) and the schema helpers;
* :mod:`rewardseal_kit.tools.mockmed`: MockMed's tools (``MOCKMED_TOOLS``, ``mockmed_session``).

The helpdesk example's tools (``helpdesk.tools``) build on the same base.
"""
