"""The operator console in a real browser: Debian's Chromium, driven headless by Selenium
through the system chromedriver (never a downloaded one), against ``rewardseal-control serve
--http-port 0`` and a ``rewardseal-worker serve`` that follows it (``--control``,
``--trust-org-key``), both as the console scripts `make up` runs.

An operator signs in, sees the seeded contract and the certificate control issued, revokes it
(with the confirmation), sees its state change on the page, and the worker's next receipt is
no longer certified under it. Screenshots land in ``.run/console/`` (git-ignored).

``make test-browser`` runs this (not ``make test``). Without ``/usr/bin/chromium`` and
``/usr/bin/chromedriver`` it skips with a message, except in CI (``CI=true``) or with
``REWARDSEAL_REQUIRE_BROWSER=1``, where it fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.linked_stack import (
    ADMIN_TOKEN,
    CLIENT_TOKEN,
    SEEDED_DIGEST,
    WORKER_TOKEN,
    eventually,
    issue_certificate,
)
from support.mockmed_episodes import descriptor, write_triage

from rewardseal.core.signing import TrustSet, key_id_for
from rewardseal.rpc.worker_client import AsyncWorkerClient
from rewardseal_server.localstack import HOST, LocalServices, enroll_worker, serve_command

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[2] / ".run" / "console"
POLL = "0.2"
"""The worker's certificate poll interval here (REWARDSEAL_WORKER_CERTIFICATE_POLL_SECONDS;
30 s by default)."""


def _browser_required() -> bool:
    return (
        os.environ.get("CI", "").lower() == "true"
        or os.environ.get("REWARDSEAL_REQUIRE_BROWSER") == "1"
    )


@pytest.fixture
def driver() -> Iterator[Any]:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        message = (
            f"{' and '.join(missing)} not installed: `make test-browser` installs Debian's "
            "chromium and chromium-driver (apt-get, as root)"
        )
        if _browser_required():
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
    ):
        options.add_argument(argument)
    # An explicit driver path: Selenium Manager never runs, so nothing is downloaded.
    browser = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()


def visit(browser: Any, url: str, heading: str) -> None:
    """Open ``url`` and wait until its page is there (its ``h1`` says ``heading``)."""
    browser.get(url)
    wait_for_heading(browser, heading)


def wait_for_heading(browser: Any, heading: str) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    # A heading found on the page being left (a form's redirect still in flight) is gone by the
    # time its text is read: that is "not there yet", so the wait goes on.
    WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda b: heading in " ".join(h.text for h in b.find_elements(By.TAG_NAME, "h1"))
    )


def certificate_row(browser: Any, certificate_id: str) -> Any:
    """The certificate's row of the certificates table (not of the revocation list's)."""
    from selenium.webdriver.common.by import By

    return browser.find_element(
        By.XPATH, f"//table[@id='certificates']//tr[td/a[text()='{certificate_id}']]"
    )


def shot(browser: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


async def test_revoke_in_the_browser_reaches_the_worker(
    driver: Any, tmp_path: Path, data_dir: Path
) -> None:
    from selenium.webdriver.common.by import By

    with LocalServices(tmp_path / "run") as local:
        control = local.start(
            "control",
            serve_command(
                "rewardseal-control",
                local.ready_file("control"),
                "--data-dir",
                str(tmp_path / "control"),
                "--http-port",
                "0",
            ),
            {
                "REWARDSEAL_CONTROL_ADMIN_TOKEN": ADMIN_TOKEN,
                "REWARDSEAL_CONTROL_TOKEN": CLIENT_TOKEN,
                "REWARDSEAL_CONTROL_WORKER_TOKEN": WORKER_TOKEN,
            },
            timeout=60,
        )
        console = str(control["console_url"])
        target = f"{HOST}:{control['port']}"
        worker = local.start(
            "worker",
            serve_command(
                "rewardseal-worker",
                local.ready_file("worker"),
                "--data-dir",
                str(data_dir),
                "--contract",
                str(data_dir / "contracts" / "mockmed"),
                "--control",
                target,
                "--trust-org-key",
                str(local.ready_file("control")),
            ),
            {
                "REWARDSEAL_WORKER_TOKEN": "worker-serving-token-" + "s" * 24,
                "REWARDSEAL_WORKER_CONTROL_TOKEN": WORKER_TOKEN,
                "REWARDSEAL_WORKER_CERTIFICATE_POLL_SECONDS": POLL,
                # Admitted for its contract when it registers, as `make up` does (R-C-11).
                **enroll_worker(target, ADMIN_TOKEN, [SEEDED_DIGEST]),
            },
            timeout=120,
        )
        digest = str(worker["contract_digest"])
        handle = _ControlHandle(target, str(control["organization_public_key"]))
        certificate_id = await issue_certificate(
            handle,  # type: ignore[arg-type]
            data_dir,
            digest,
            certificate_id="cert.browser.0001",
        )
        client = AsyncWorkerClient(
            f"{HOST}:{worker['port']}",
            token=str(worker["token"]),
            trust=TrustSet([bytes.fromhex(str(worker["public_key"]))]),
            timeout=20.0,
        )
        async with client:

            async def in_use(expected: bool) -> bool:
                held = (await client.health()).certificate_id
                return (held == certificate_id) is expected

            async def score(index: int, *, honest: bool = True) -> Any:
                patient, episode = f"patient-browser-{index:04d}", f"episode.browser.{index:04d}"
                await client.begin(episode, digest, {"patient_id": patient})
                if honest:  # else the policy claims the triage but never writes it
                    write_triage(data_dir / "mockmed" / "mockmed.sqlite", patient)
                answer = await client.score(descriptor(digest, episode, update=index))
                return answer.receipt

            await eventually(lambda: in_use(True), within=30)
            # A little training history for the contract page's chart: six updates, two lies.
            before = [await score(index, honest=index not in (2, 4)) for index in range(6)]
            assert before[0].certified, before[0].certification_refusals
            assert before[0].certificate_id == certificate_id

            # Sign in.
            visit(driver, f"{console}/contracts", "Sign in")
            assert driver.current_url.endswith("/login")
            shot(driver, "01-sign-in")
            driver.find_element(By.ID, "token").send_keys(ADMIN_TOKEN)
            driver.find_element(By.ID, "sign-in").click()
            wait_for_heading(driver, "Reward contracts")
            assert driver.current_url.endswith("/contracts"), driver.page_source[:500]
            assert ADMIN_TOKEN not in driver.page_source
            assert "mockmed" in driver.page_source
            cookies = {cookie["name"]: cookie for cookie in driver.get_cookies()}
            assert cookies["rewardseal_console"]["httpOnly"] is True
            assert cookies["rewardseal_console"]["secure"] is True
            assert cookies["rewardseal_console"]["sameSite"] == "Strict"
            shot(driver, "02-contracts")

            # The contract's receipts reach control's index (the worker forwards them).
            driver.find_element(By.PARTIAL_LINK_TEXT, "mockmed").click()
            wait_for_heading(driver, "mockmed")
            await eventually(
                lambda: _reloaded_shows(driver, "<strong>6</strong> receipts"), within=30
            )
            shot(driver, "03-contract")

            # The certificate, current, and the revocation with its confirmation.
            visit(driver, f"{console}/certificates", "Certificates")
            row = certificate_row(driver, certificate_id)
            assert "current" in row.text
            shot(driver, "04-certificates")
            row.find_element(By.LINK_TEXT, certificate_id).click()
            wait_for_heading(driver, certificate_id)
            driver.find_element(By.ID, "revoke").click()
            wait_for_heading(driver, "Revoke certificate")
            driver.find_element(By.ID, "reason").send_keys("browser test: key material leaked")
            driver.find_element(By.ID, "confirm").send_keys(certificate_id)
            shot(driver, "05-confirm-revoke")
            driver.find_element(By.ID, "confirm-revoke").click()
            wait_for_heading(driver, certificate_id)
            assert driver.current_url.endswith(f"/certificates/{certificate_id}")
            assert "revoked" in driver.find_element(By.CLASS_NAME, "headline").text
            assert "key material leaked" in driver.find_element(By.ID, "revocation-reason").text
            shot(driver, "06-revoked")
            visit(driver, f"{console}/certificates", "Certificates")
            row = certificate_row(driver, certificate_id)
            assert "revoked" in row.text
            shot(driver, "07-certificates-after")

            # The worker's next receipt is no longer certified under the revoked certificate.
            await eventually(lambda: in_use(False), within=30)
            after = await score(6)
            assert after.certificate_id != certificate_id
            visit(driver, f"{console}/audit-log", "Audit log")
            assert "admin:console" in driver.page_source
            shot(driver, "08-audit-log")
            visit(driver, f"{console}/keys", "Issuer keys")
            assert "control plane organization key" in driver.page_source
            shot(driver, "09-keys")
            visit(driver, f"{console}/integrity", "Reward-integrity audits")
            shot(driver, "10-integrity")


async def _reloaded_shows(driver: Any, text: str) -> bool:
    driver.refresh()
    return text in driver.page_source and "<svg" in driver.page_source


class _ControlHandle:
    """What the issuing helpers need of a control plane that runs as a process."""

    def __init__(self, target: str, public_key_hex: str) -> None:
        self.target = target
        self.key = _KeyId(key_id_for(bytes.fromhex(public_key_hex)))


class _KeyId:
    def __init__(self, key_id: str) -> None:
        self.key_id = key_id
