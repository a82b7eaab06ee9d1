"""The paraphrase set (issue 14): facts planted in a synthetic coworker history, each asked once
in the history's own words and once in other words, plus questions nothing in it answers.

Owns the hand-written data only: every fact's events (when in the history they happen, who
writes them, their text), its "exact" question and its "paraphrase" question, the unanswerable
questions with words the history never contains, and the split into a tuning half and a
held-apart half (fixed here, by id: even numbers tune, odd numbers are held apart). A
paraphrase shares no content-word stem (`memory.tokens`: stems of the words left after
stopwords) with its fact's events' body, actor or kind; tests/test_eval_paraphrase.py checks it.

Written by hand before any tuning code and not to be edited to suit a result: a question that
turns out wrong is fixed in a commit that says so. The history around the facts is
`evalsets.history`'s; the run and its figures are `runtime.eval_paraphrase`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

HALVES = ("tuning", "held")


@dataclass(frozen=True)
class FactEvent:
    kind: str
    actor: str
    author_kind: str
    body: str


@dataclass(frozen=True)
class Fact:
    id: str
    half: str
    day: int  # working day of the history, 0 = its first Monday
    at: str  # HH:MM, UTC; the fact's events follow each other a minute apart
    events: tuple[FactEvent, ...]
    exact: str
    paraphrase: str


@dataclass(frozen=True)
class Unanswerable:
    id: str
    half: str
    question: str
    absent: tuple[str, ...]  # words of the question the history never contains


def _e(kind: str, actor: str, body: str) -> FactEvent:
    author = {"owner": "user", "coworker": "agent", "shell": "tool", "ci": "tool"}.get(
        actor, "third_party")
    return FactEvent(kind, actor, author, body)


def _f(fid: str, half: str, day: int, at: str, events: list[FactEvent], exact: str,
       paraphrase: str) -> Fact:
    return Fact(fid, half, day, at, tuple(events), exact, paraphrase)


FACTS: tuple[Fact, ...] = (
    _f("F01", "held", 1, "10:14",
       [_e("decision", "coworker",
           "Priya Natarajan owns the ledger reconciliation service from April onwards.")],
       "Who owns the ledger reconciliation service?",
       "Which colleague is accountable for matching up the bookkeeping entries?"),
    _f("F02", "tuning", 2, "09:40",
       [_e("message", "owner",
           "The Q2 offsite will be in Porto on 14 May; book flights before Friday.")],
       "Where is the Q2 offsite?",
       "In which city does the team gather for the spring retreat?"),
    _f("F03", "held", 7, "08:55",
       [_e("note", "coworker",
           "Outage at 2 a.m. on March 12: payments gateway down for 40 minutes."),
        _e("note", "coworker",
           "Postmortem: the March 12 outage was caused by an expired TLS certificate on the "
           "payments gateway.")],
       "What caused the outage on March 12?",
       "Why did checkout stop working overnight mid-month?"),
    _f("F04", "tuning", 3, "11:05",
       [_e("message", "hannah",
           "Kenji Watanabe joins the data platform team as staff engineer on March 24.")],
       "When does Kenji Watanabe join the data platform team?",
       "When is the first day for our new senior hire in analytics infrastructure?"),
    _f("F05", "held", 4, "15:20",
       [_e("decision", "coworker",
           "We will migrate the nightly batch jobs from cron to Airflow by end of April.")],
       "Are we migrating the nightly batch jobs to Airflow?",
       "Which orchestration product replaces the scheduled overnight tasks?"),
    _f("F06", "tuning", 5, "13:30",
       [_e("message", "owner",
           "The vendor contract with Brightline Analytics renews on 30 June at 48,000 euros "
           "a year.")],
       "When does the Brightline Analytics contract renew?",
       "What is the deadline for extending our agreement with that metrics supplier?"),
    _f("F07", "held", 6, "10:02",
       [_e("message", "owner", "Sofia Mendes is on parental leave from April 7 to July 4."),
        _e("decision", "coworker", "Omar covers Sofia's reviews until she returns.")],
       "Who covers Sofia Mendes's reviews during her parental leave?",
       "Who handles pull request approvals while our colleague cares for a newborn?"),
    _f("F08", "tuning", 8, "14:45",
       [_e("decision", "coworker",
           "The public API stays on version 2 until all partners move off v1; no v3 this "
           "year.")],
       "Will the public API move to v3 this year?",
       "Are we shipping a new major interface release for integrators soon?"),
    _f("F09", "held", 9, "16:10",
       [_e("note", "coworker",
           "Incident 4471: the search index lost 2 hours of writes after the disk filled; "
           "Luis restored it from the snapshot.")],
       "Who restored the search index in incident 4471?",
       "Which engineer brought back the lookup data after the storage ran out of space?"),
    _f("F10", "tuning", 10, "09:25",
       [_e("message", "hannah",
           "Budget for the observability tooling is capped at 12,000 dollars for the quarter, "
           "approved by Hannah.")],
       "What is the budget cap for observability tooling?",
       "How much money can we spend on monitoring software this period?"),
    _f("F11", "held", 11, "12:15",
       [_e("message", "owner",
           "The design review for the new onboarding flow is on Thursday 20 March at 3pm in "
           "room Atlas.")],
       "When is the design review for the onboarding flow?",
       "What time do we meet to critique the signup experience mockups?"),
    _f("F12", "tuning", 12, "10:50",
       [_e("note", "coworker",
           "Mobile release 5.3 slipped to 2 April because the App Store rejected the build "
           "over the privacy manifest.")],
       "Why did mobile release 5.3 slip?",
       "What held back the iOS version, and why did Apple turn it down?"),
    _f("F13", "held", 13, "09:05",
       [_e("message", "owner",
           "Ines Duarte is the new on-call lead for the payments team starting next week.")],
       "Who is the on-call lead for the payments team?",
       "Which person gets paged first when checkout breaks?"),
    _f("F14", "tuning", 14, "17:05",
       [_e("tool_result", "shell",
           "load test on staging sustained 3,400 requests per second before p99 latency "
           "passed 800 ms")],
       "How many requests per second did the staging load test sustain?",
       "What throughput did the pre-production stress run reach?"),
    _f("F15", "held", 15, "11:40",
       [_e("decision", "coworker",
           "Customer data for EU tenants stays in the Frankfurt region; no replication to "
           "other regions.")],
       "Where does EU tenant data stay?",
       "In which location must European clients' records be hosted?"),
    _f("F16", "tuning", 16, "14:00",
       [_e("message", "marta",
           "Marta Kowalski approved the hiring of two contractors for the migration, starting "
           "1 April.")],
       "Who approved the contractors for the migration?",
       "Which manager signed off on bringing in outside help for the move?"),
    _f("F17", "held", 17, "09:15",
       [_e("message", "owner",
           "Reminder: the SOC 2 audit fieldwork starts on 9 April; evidence folders must be "
           "ready by the 4th.")],
       "When does the SOC 2 audit fieldwork start?",
       "On what day do the compliance inspectors begin their checks?"),
    _f("F18", "tuning", 18, "15:35",
       [_e("note", "coworker",
           "Noah Fischer found the memory leak in the image resizer: a cache of decoded "
           "thumbnails never evicted entries.")],
       "What caused the memory leak in the image resizer?",
       "Why did the picture scaling worker keep growing in RAM?"),
    _f("F19", "held", 19, "13:10",
       [_e("decision", "coworker",
           "We picked Postgres 16 over CockroachDB for the ledger because the team already "
           "runs it and the cost is lower.")],
       "Why did we pick Postgres over CockroachDB for the ledger?",
       "What was the reasoning behind the database choice for the accounting store?"),
    _f("F20", "tuning", 20, "10:30",
       [_e("message", "owner",
           "The feature flag for dark mode is owned by Tomás Rivera; turn it off only with "
           "his approval.")],
       "Who owns the dark mode feature flag?",
       "Whom should I ask before disabling the night theme toggle?"),
    _f("F21", "held", 21, "11:55",
       [_e("message", "support",
           "Customer Helios Freight reported duplicate invoices on 17 March."),
        _e("note", "coworker",
           "Helios Freight invoices: root cause was a retry without an idempotency key.")],
       "What was the root cause of the duplicate invoices for Helios Freight?",
       "Why did that shipping client get billed twice?"),
    _f("F22", "tuning", 22, "09:50",
       [_e("message", "owner",
           "Lunch and learn on Friday 28 March: Aisha presents the new tracing setup with "
           "OpenTelemetry.")],
       "Who presents the OpenTelemetry tracing setup at the lunch and learn?",
       "Which teammate gives the midday talk about distributed request spans?"),
    _f("F23", "held", 23, "16:40",
       [_e("decision", "coworker",
           "Code freeze for the spring release begins 11 April at noon; only hotfixes after "
           "that.")],
       "When does the code freeze for the spring release begin?",
       "From what moment are urgent patches alone allowed to merge?"),
    _f("F24", "tuning", 24, "10:05",
       [_e("note", "coworker",
           "The staging database password was rotated by Ravi on 19 March after it showed up "
           "in a CI log.")],
       "Who rotated the staging database password?",
       "Which person changed the test environment credentials after the leak in the build "
       "pipeline output?"),
    _f("F25", "held", 0, "09:30",
       [_e("message", "owner",
           "I prefer weekly status reports on Monday mornings, short, in bullet points.")],
       "When does the owner want weekly status reports?",
       "How often, and on which weekday, should progress updates go out?"),
    _f("F26", "tuning", 25, "14:20",
       [_e("message", "owner",
           "The Berlin office moves to Torstraße 140 on 1 May; the old Mitte address closes "
           "the same week.")],
       "Where does the Berlin office move?",
       "What is the new street location for the German capital team?"),
    _f("F27", "held", 26, "11:25",
       [_e("decision", "coworker",
           "We drop support for Internet Explorer 11 on the customer portal from June.")],
       "When do we drop Internet Explorer 11 support on the customer portal?",
       "Until what month will the legacy Microsoft browser keep working for clients signing "
       "in?"),
    _f("F28", "tuning", 27, "15:00",
       [_e("message", "owner",
           "Grace Liu is the product owner for the reporting module; send roadmap questions "
           "to her.")],
       "Who is the product owner for the reporting module?",
       "Which PM decides priorities for the analytics dashboards?"),
    _f("F29", "held", 28, "10:45",
       [_e("tool_result", "shell",
           "redis cluster upgraded to 7.2; failover took 14 seconds, within the 30-second "
           "target")],
       "How long did the Redis failover take during the upgrade?",
       "How many moments of downtime did the in-memory key value store switchover cause?"),
    _f("F30", "tuning", 29, "12:35",
       [_e("message", "hannah",
           "Oliver Brandt left the company on 21 March; his services now belong to the "
           "platform team.")],
       "When did Oliver Brandt leave the company?",
       "On which date was the departing engineer last employed here?"),
    _f("F31", "held", 2, "16:25",
       [_e("tool_result", "ci",
           "dependency scan: 3 critical vulnerabilities in lodash 4.17.15 in the web client; "
           "upgrade to 4.17.21 fixes all")],
       "Which lodash version fixes the critical vulnerabilities?",
       "What package bump resolves the severe security holes in the JavaScript frontend?"),
    _f("F32", "tuning", 4, "10:20",
       [_e("message", "owner", "The annual hackathon is 5-6 June; the theme this year is "
           "accessibility.")],
       "What is the theme of the annual hackathon?",
       "What topic did they choose for the yearly coding contest?"),
    _f("F33", "held", 6, "17:10",
       [_e("message", "owner",
           "Never merge database migrations on a Friday afternoon; wait for Monday.")],
       "Can we merge database migrations on a Friday afternoon?",
       "Is it fine to ship schema changes at the end of the work week?"),
    _f("F34", "tuning", 8, "11:15",
       [_e("note", "coworker",
           "Pedro Alves fixed the flaky checkout test by freezing the clock; the suite has been "
           "green for 5 days.")],
       "How was the flaky checkout test fixed?",
       "What stopped the intermittent purchase spec from failing?"),
    _f("F35", "held", 10, "14:55",
       [_e("message", "owner",
           "The SLA for enterprise customers is 99.95% monthly uptime with 4-hour response "
           "for P1 tickets.")],
       "What is the SLA uptime for enterprise customers?",
       "What availability do we guarantee our biggest clients each month?"),
    _f("F36", "tuning", 12, "13:45",
       [_e("decision", "coworker",
           "Error tracking moves from Sentry to Honeybadger when the Sentry contract ends in "
           "May.")],
       "Are we moving error tracking from Sentry to Honeybadger?",
       "Which crash reporting service will we switch to?"),
    _f("F37", "held", 14, "09:35",
       [_e("message", "owner",
           "Yuki Tanaka will give the quarterly security training on 8 April; attendance is "
           "mandatory for engineers.")],
       "Who gives the quarterly security training?",
       "Which colleague runs the compulsory safety course every three months?"),
    _f("F38", "tuning", 16, "16:50",
       [_e("note", "coworker",
           "The Kafka consumer lag alert threshold was raised from 10,000 to 50,000 messages "
           "after too many false pages.")],
       "Why was the Kafka consumer lag alert threshold raised?",
       "Why did we loosen the queue backlog warning limit?"),
    _f("F39", "held", 18, "11:00",
       [_e("message", "amara",
           "I negotiated a 15% discount with the cloud provider in exchange for a three-year "
           "commitment.")],
       "What discount did Amara negotiate with the cloud provider?",
       "How much cheaper did hosting get after signing the long term deal?"),
    _f("F40", "tuning", 20, "15:15",
       [_e("message", "owner",
           "The intern project this summer is a Slack bot for on-call handoffs, mentored by "
           "Ines.")],
       "What is the intern project this summer?",
       "What will the student trainee build over the warm months?"),
    _f("F41", "held", 22, "12:05",
       [_e("decision", "coworker",
           "The minimum supported Android version for the mobile app is 10, starting with "
           "release 6.0.")],
       "What is the minimum supported Android version for the mobile app?",
       "Which Google phone OS is the oldest we still allow?"),
    _f("F42", "tuning", 24, "17:20",
       [_e("note", "coworker",
           "Backups of the production database are kept for 35 days and tested by a restore "
           "every Sunday.")],
       "How long are production database backups kept?",
       "What retention period applies to our nightly snapshots of live data?"),
    _f("F43", "held", 26, "09:10",
       [_e("message", "owner",
           "Ravi's laptop was stolen at the airport on 13 March; IT wiped it remotely and "
           "revoked his keys.")],
       "What happened after Ravi's laptop was stolen?",
       "How was the missing computer handled by the help desk?"),
    _f("F44", "tuning", 28, "13:25",
       [_e("tool_result", "shell",
           "survey results: 68% of admins want single sign-on before any new reports")],
       "What share of admins want single sign-on?",
       "What percentage of administrators asked for SSO?"),
)

UNANSWERABLE: tuple[Unanswerable, ...] = (
    Unanswerable("U01", "held", "Who owns the Kubernetes helm charts?", ("kubernetes", "helm")),
    Unanswerable("U02", "tuning", "When is the company holiday party in Lisbon?", ("lisbon",)),
    Unanswerable("U03", "held", "What did we decide about migrating to GraphQL?", ("graphql",)),
    Unanswerable("U04", "tuning", "Who is the account manager for Zephyr Logistics?",
                 ("zephyr", "logistics")),
    Unanswerable("U05", "held", "How much did the Snowflake warehouse cost last month?",
                 ("snowflake", "warehouse")),
    Unanswerable("U06", "tuning", "When does Beatriz Okafor start on the design team?",
                 ("beatriz", "okafor")),
    Unanswerable("U07", "held", "What caused the DNS outage in Singapore?",
                 ("dns", "singapore")),
    Unanswerable("U08", "tuning", "Which vendor supplies our office coffee machines?",
                 ("coffee",)),
    Unanswerable("U09", "held", "What is the parking policy at the Warsaw office?",
                 ("parking", "warsaw")),
    Unanswerable("U10", "tuning", "Who approved the Terraform state migration?",
                 ("terraform",)),
    Unanswerable("U11", "held", "What did the penetration testers find in the Android SDK?",
                 ("penetration", "sdk")),
    Unanswerable("U12", "tuning", "When is the board meeting about the Series B funding?",
                 ("board", "series", "funding")),
)
