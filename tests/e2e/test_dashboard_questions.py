"""Chromium over the dashboard's "Questions waiting for you": a bridge's question shown as
text (its sandbox-chosen part can carry markup), Yes and No posting the answer for that
session and id alone."""

from __future__ import annotations

import time

from playwright.sync_api import Browser, expect

from tests.e2e.test_dashboard import ScriptedDashboard, _tables, console_errors

MARKUP = "<img src=x onerror=alert(1)>"


def _question(qid: str, text: str) -> dict[str, object]:
    now = time.time()
    return {"session": "web", "id": qid, "kind": "ssh-agent", "text": text, "asked": now,
            "expires": now + 60}  # fmt: skip


def test_yes_and_no_answer_the_question_of_their_row_and_its_text_stays_text(
    browser: Browser,
) -> None:
    text = f"the sandbox asks to sign with your key SHA256:x ('me'): ssh login as '{MARKUP}'"
    tables = {**_tables(), "questions": [_question("0a1b2c3d", text), _question("9f8e7d6c", "two")]}
    served = ScriptedDashboard(tables, lambda body: {"answered": body["id"], "yes": body["yes"]})
    context = browser.new_context()
    try:
        page = context.new_page()
        errors = console_errors(page)
        page.goto(served.url)
        row = page.locator("#questions tbody tr", has_text="ssh login")
        expect(row.locator("td").nth(2)).to_have_text(text)
        expect(page.locator("#questions img")).to_have_count(0)
        yes = page.get_by_role("button", name="Yes to question 0a1b2c3d of web")
        expect(yes).not_to_have_attribute("aria-disabled", "true")  # settled
        yes.click()
        expect(page.locator("#status")).to_have_text("allowed: ssh-agent question 0a1b2c3d")
        no = page.get_by_role("button", name="No to question 9f8e7d6c of web")
        no.click()
        expect(page.locator("#status")).to_have_text("refused: ssh-agent question 9f8e7d6c")
        assert served.actions == [
            {"action": "question_answer", "session": "web", "id": "0a1b2c3d", "yes": True},
            {"action": "question_answer", "session": "web", "id": "9f8e7d6c", "yes": False},
        ]
        served.change(_tables())
        expect(page.locator("#questions tbody")).to_contain_text("none")
        assert errors == []
    finally:
        context.close()
        served.close()
