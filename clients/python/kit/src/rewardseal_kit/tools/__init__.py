"""Agent tools over the synthetic systems of record, written once for every trainer integration.

* :mod:`rewardseal_kit.tools.base`: :class:`~rewardseal_kit.tools.base.Tool` (an
  :class:`rewardseal.trainers.tools.AgentTool`), :class:`~rewardseal_kit.tools.base.ToolSession`
  (one episode's identity, URL and token) and the schema helpers;
* :mod:`rewardseal_kit.tools.mockmed`: MockMed's tools (``MOCKMED_TOOLS``, ``mockmed_session``);
* :mod:`rewardseal_kit.tools.families`: every hacking family and the honest control as a script
  of those tools (``family_script``), the one table the scripted tool-calling policies play.

The helpdesk example's tools (``helpdesk.tools``) build on the same base.
"""
