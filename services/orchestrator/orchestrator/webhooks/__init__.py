"""Signed webhooks (Standard Webhooks): subscriptions, the outbox and its delivery worker."""
