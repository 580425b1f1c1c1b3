"""The operator console: server-rendered pages of the control plane, served over HTTP(S) by the
control process itself (``rewardseal-control serve --http-port P``), docs/console.md.

:func:`~rewardseal_control.console.server.start_console` serves
:func:`~rewardseal_control.console.app.create_console_app` beside the gRPC server, in its event
loop, over the control plane's domain layer (:class:`~rewardseal_control.domain.ControlPlane`).
"""
