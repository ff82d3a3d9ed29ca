#!/usr/bin/env python3
"""Drives the operator console in Debian's chromium (Playwright for Python) and checks what an operator relies on.

Usage: console_browser.py SPEC.json   (written by Tests/ConsoleTests/ConsoleBrowserTests.swift)

The spec names the console's URL, a support and a viewer operator, and for each subscription the notification rows
its timeline must show (data-outcome, data-deliveries). Every failed check is printed; the exit status is the number
of failures (0: all passed). With "screenshots" set to a folder, each page is saved there at desktop and phone width.
"""
import json
import re
import sys
from urllib.parse import quote

from playwright.sync_api import sync_playwright

spec = json.load(open(sys.argv[1]))
base = spec["url"]
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, flush=True)


def sign_in(page, account):
    page.goto(base + "/login")
    page.fill("input[name=email]", account["email"])
    page.fill("input[name=password]", account["password"])
    page.click("form[action='/login'] button")
    page.wait_for_load_state()


def csrf_of(page):
    return page.locator("input[name=csrf]").first.get_attribute("value")


def shoot(page, name):
    folder = spec.get("screenshots")
    if not folder:
        return
    for label, size in (("desktop", {"width": 1280, "height": 900}), ("phone", {"width": 390, "height": 844})):
        page.set_viewport_size(size)
        page.screenshot(path=f"{folder}/{name}-{label}.png", full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    dialogs = []

    # Without a session every page leads to the login; the login page itself carries the headers.
    context = browser.new_context()
    page = context.new_page()
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    for path in ["/", "/search?q=1", "/dead-letters", "/audit", "/apps/x/subscriptions/1", "/apps/x/customers/1", "/notifications/1"]:
        page.goto(base + path)
        check("/login" in page.url, f"{path} without a session goes to the login (went to {page.url})")
    response = page.goto(base + "/login")
    csp = response.headers.get("content-security-policy", "")
    check("default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "script-src" not in csp, f"CSP forbids scripts and framing: {csp}")
    check(response.headers.get("x-frame-options") == "DENY", "X-Frame-Options: DENY")
    shoot(page, "login")

    # A wrong password is refused; the right one opens a session with a strict cookie.
    page.fill("input[name=email]", spec["support"]["email"])
    page.fill("input[name=password]", "wrong-password")
    page.click("form[action='/login'] button")
    check(page.locator("p.error").count() == 1, "a wrong password is refused with a message")
    sign_in(page, spec["support"])
    cookies = {c["name"]: c for c in context.cookies()}
    session = cookies.get("console_session")
    check(session is not None, "a session cookie after sign-in")
    if session:
        check(session["httpOnly"] and session["secure"] and session["sameSite"] == "Strict", f"cookie flags HttpOnly, Secure, SameSite=Strict: {session}")
    shoot(page, "home")

    # Search: each kind of identifier leads to its page.
    for search in spec["searches"]:
        page.goto(base + "/search?q=" + quote(search["q"], safe=""))
        check(search["path"] in page.url, f"search {search['q']!r} leads to {search['path']} (at {page.url})")

    # Each subscription's timeline: exactly the notifications sent, with their outcome and deliveries.
    bundle = spec["bundleId"]
    for subscription in spec["subscriptions"]:
        page.goto(f"{base}/apps/{quote(bundle, safe='')}/subscriptions/{quote(subscription['id'], safe='')}")
        seen = {}
        for row in page.locator("[data-notification-uuid]").all():
            seen[row.get_attribute("data-notification-uuid")] = {
                "outcome": row.get_attribute("data-outcome"), "deliveries": int(row.get_attribute("data-deliveries")),
            }
        expected = subscription["rows"]
        check(set(seen) == set(expected), f"subscription {subscription['id']}: rows {sorted(seen)} are {sorted(expected)}")
        for uuid, want in expected.items():
            got = seen.get(uuid)
            check(got == want, f"subscription {subscription['id']}, {uuid}: {got} is {want}")
        check(page.locator("[data-event-id]").count() >= 1, f"subscription {subscription['id']}: its entitlement events are in the timeline")
        check(page.locator("main script, main img").count() == 0, f"subscription {subscription['id']}: no element from attacker text")
    page.goto(f"{base}/apps/{quote(bundle, safe='')}/subscriptions/{quote(spec['subscriptions'][0]['id'], safe='')}")
    shoot(page, "subscription")

    # Dead letters: the forged payload's markup shown as text, nothing of it run.
    page.goto(base + "/dead-letters")
    check(page.locator("tr.dead-letter").count() >= 1, "the forged payload is listed as a dead letter")
    check(spec["markup"] in page.locator("main").inner_text(), "the forged markup is shown as text")
    check(page.locator("main script, main img").count() == 0, "no element from the forged payload")
    shoot(page, "dead-letters")

    # A state change without the CSRF token is refused; a re-drive with a reason is done and audited.
    refused = context.request.post(base + "/dead-letters/redrive", form={"position": "x:0:0", "reason": "no token"}, max_redirects=0)
    check(refused.status == 403, f"a POST without the CSRF token: 403 (got {refused.status})")
    page.goto(base + "/dead-letters")
    page.locator("tr.dead-letter input[type=checkbox]").first.check()
    page.fill("input[name=reason]", "customer wrote in: checking the forged delivery")
    page.click("text=Re-drive selected")
    page.wait_for_load_state()
    check("Re-drove 1" in page.locator("main").inner_text(), "the re-drive is confirmed")
    page.goto(base + "/audit")
    check(page.locator("tr.audit[data-action=redrive]").count() >= 1, "the re-drive is in /audit")
    shoot(page, "audit")
    target = spec["subscriptions"][0]["id"]
    forged_target = next(s["id"] for s in spec["subscriptions"] if spec["markup"] in s["rows"])
    page.goto(f"{base}/apps/{quote(bundle, safe='')}/subscriptions/{quote(forged_target, safe='')}")
    check(page.locator("[data-kind=action]").count() >= 1, "the re-drive is in the claimed subscription's timeline")

    # Reconcile with Apple now (the fake App Store Server API answers) and re-send the subscription's events to a
    # webhook endpoint: both need a reason, both are confirmed and audited.
    subscription_url = f"{base}/apps/{quote(bundle, safe='')}/subscriptions/{quote(spec['reconcileTarget'], safe='')}"
    page.goto(subscription_url)
    page.fill("input[name=reason]", "customer says the renewal is missing")
    page.click("button[value=reconcile]")
    page.wait_for_load_state()
    answer = page.locator("main").inner_text()
    asked = re.search(r"Asked Apple: (\d+) status snapshot", answer)
    check(asked is not None and int(asked.group(1)) >= 1, f"reconcile asked Apple and sent its snapshots: {answer[:300]!r}")
    page.goto(subscription_url)
    page.select_option("select[name=endpoint]", spec["resendEndpoint"])
    page.fill("input[name=reason]", "backend missed the events")
    page.click("button[value=resend-webhooks]")
    page.wait_for_load_state()
    check("1 event(s) of this subscription go to " + spec["resendEndpoint"] in page.locator("main").inner_text(), "the re-send is confirmed")
    page.goto(base + "/audit")
    for action in ("reconcile", "resend-webhooks"):
        check(page.locator(f"tr.audit[data-action={action}]").count() == 1, f"{action} is in /audit")
    no_reason = context.request.post(subscription_url, form={"csrf": csrf_of(page), "action": "reconcile", "reason": " "}, max_redirects=0)
    check(no_reason.status == 400, f"an action without a reason: 400 (got {no_reason.status})")

    # Failed sign-ins are limited per account: the sixth for one account is 429 with Retry-After.
    statuses = []
    for _ in range(6):
        answer = browser.new_context().request.post(base + "/login", form={"email": "nobody@example.com", "password": "guess"}, max_redirects=0)
        statuses.append(answer.status)
    check(statuses[:5] == [401] * 5 and statuses[5] == 429 and answer.headers.get("retry-after"), f"five refusals, then 429 with Retry-After: {statuses}")

    # A viewer sees but cannot act.
    viewer_context = browser.new_context()
    viewer = viewer_context.new_page()
    sign_in(viewer, spec["viewer"])
    viewer.goto(base + "/dead-letters")
    check(viewer.locator("text=Re-drive selected").count() == 0, "a viewer is offered no re-drive")
    token = csrf_of(viewer)
    forbidden = viewer_context.request.post(base + "/dead-letters/redrive", form={"csrf": token, "position": "x:0:0", "reason": "viewer tries"}, max_redirects=0)
    check(forbidden.status == 403, f"a viewer's re-drive: 403 (got {forbidden.status})")

    # Erasure: offered to admins only, confirmed by typing the customer id, audited by request id.
    customer_url = f"{base}/apps/{quote(bundle, safe='')}/customers/{quote(spec['eraseCustomer'], safe='')}"
    page.goto(customer_url)
    check(page.locator("#erase").count() == 0, "a support operator is offered no erasure")
    refused = context.request.post(customer_url + "/erase", form={"csrf": csrf_of(page), "reason": "support tries", "confirm": spec["eraseCustomer"]}, max_redirects=0)
    check(refused.status == 403, f"a support operator's erasure: 403 (got {refused.status})")
    admin_context = browser.new_context()
    admin = admin_context.new_page()
    sign_in(admin, spec["admin"])
    admin.goto(customer_url)
    check(admin.locator("#erase").count() == 1, "an admin is offered the erasure")
    check(admin.locator("main a[href*='/subscriptions/']").count() >= 1, "the customer has a subscription before")
    mismatch = admin_context.request.post(customer_url + "/erase", form={"csrf": csrf_of(admin), "reason": "ticket 42", "confirm": "someone else"}, max_redirects=0)
    check(mismatch.status == 400, f"an erasure not confirmed: 400 (got {mismatch.status})")
    admin.fill("#erase input[name=reason]", "privacy request, ticket 42")
    admin.fill("#erase input[name=confirm]", spec["eraseCustomer"])
    admin.click("#erase button[value=erase]")
    admin.wait_for_load_state()
    check("completed" in admin.locator("main").inner_text() and admin.locator("[data-request-id]").count() == 1, "the erasure is confirmed with its request id")
    admin.goto(customer_url)
    check("No subscription of this customer." in admin.locator("main").inner_text(), "the erased customer has nothing left")
    admin.goto(base + "/audit")
    check(admin.locator("tr.audit[data-action=erase]").count() == 1, "the erasure is in /audit")
    check(spec["eraseCustomer"] not in admin.locator("main").inner_text(), "the audit does not name the erased customer")

    # Signing out ends the session.
    page.goto(base + "/")
    page.click("text=Sign out")
    page.goto(base + "/audit")
    check("/login" in page.url, "after signing out, pages lead to the login")
    check(not dialogs, f"no dialog opened (attacker script ran): {dialogs}")
    browser.close()

if failures:
    print(f"console browser checks: {len(failures)} failed")
    sys.exit(min(len(failures), 100))
print("console browser checks: all passed")
