"""Scrape a real ``/metrics`` endpoint and read samples by name and labels."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape_sync(url: str) -> Samples:
    """Every sample ``url`` serves, keyed by (sample name, labels)."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape(url: str) -> Samples:
    """:func:`scrape_sync` off the event loop (the server under test runs on it)."""
    return await asyncio.to_thread(scrape_sync, url)


def value(samples: Samples, name: str, labels: Mapping[str, str] | None = None) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when absent: a counter not yet moved)."""
    return samples.get((name, frozenset((labels or {}).items())), 0.0)


def matching(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """Every sample called ``name``, by its labels."""
    return {labels: v for (sample, labels), v in samples.items() if sample == name}


async def eventually_value(
    url: str,
    name: str,
    labels: Mapping[str, str],
    expected: float,
    *,
    within: float = 20.0,
) -> None:
    """Scrape ``url`` until the sample reads ``expected``; fail after ``within`` seconds."""
    seen = None
    try:
        async with asyncio.timeout(within):
            while (seen := value(await scrape(url), name, labels)) != expected:  # noqa: ASYNC110 - polls another server
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"{name}{dict(labels)} is {seen}, not {expected}") from None
