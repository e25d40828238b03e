"""Campaigns: one study template repeated on a schedule over the same devices (issue 29).

``template`` (what a campaign runs and when), ``budget`` (what each device may spend, and its
ledger across occurrences), ``simulate`` (every occurrence in process under a simulated clock).
docs/campaigns.md describes them.
"""
