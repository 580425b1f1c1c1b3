"""A signed-in browser for the console tests: real HTTP (httpx) against a real control process's
console, with the cookie handling a browser does for a Secure cookie on loopback (httpx's jar
keeps Secure cookies for https only, so the cookies are carried here by hand)."""

from __future__ import annotations

import re
from http.cookies import SimpleCookie

import httpx

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


class ConsoleBrowser:
    """Cookies and the last CSRF token of one browser session."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.AsyncClient(base_url=base_url, timeout=10.0, follow_redirects=False)
        self.cookies: dict[str, str] = {}
        self.set_cookie_headers: list[str] = []

    async def close(self) -> None:
        await self.client.aclose()

    def _keep(self, response: httpx.Response) -> httpx.Response:
        for header in response.headers.get_list("set-cookie"):
            self.set_cookie_headers.append(header)
            parsed = SimpleCookie()
            parsed.load(header)
            for name, morsel in parsed.items():
                if morsel["max-age"] == "0" or not morsel.value or morsel.value == '""':
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel.value
        return response

    def _cookie_header(self) -> dict[str, str]:
        if not self.cookies:
            return {}
        return {"cookie": "; ".join(f"{name}={value}" for name, value in self.cookies.items())}

    async def get(self, path: str) -> httpx.Response:
        return self._keep(await self.client.get(path, headers=self._cookie_header()))

    async def post(
        self, path: str, form: dict[str, str], *, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        return self._keep(
            await self.client.post(
                path, data=form, headers={**self._cookie_header(), **(headers or {})}
            )
        )

    async def sign_in(self, token: str) -> httpx.Response:
        """Fetch the sign-in form, then send it with ``token``."""
        form = await self.get("/login")
        return await self.post("/login", {"csrf_token": csrf_of(form), "token": token})


def csrf_of(response: httpx.Response) -> str:
    """The CSRF token of the (first) form of a page."""
    found = CSRF_FIELD.search(response.text)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)
