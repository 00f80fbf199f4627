"""Digests of rendered text ignore a CDK token's per-process counter, and only that."""

from cpu_inference._internal.tokens import is_token, stable_digest


def test_a_tokens_counter_does_not_change_the_digest_but_its_kind_and_the_text_do() -> None:
    a = stable_digest('{"region": "${Token[AWS.Region.8]}", "x": 1}')
    assert a == stable_digest('{"region": "${Token[AWS.Region.12]}", "x": 1}')
    assert a != stable_digest('{"region": "${Token[AWS.AccountId.8]}", "x": 1}')
    assert a != stable_digest('{"region": "${Token[AWS.Region.8]}", "x": 2}')
    assert stable_digest("${Token[TOKEN.1]}") == stable_digest("${Token[TOKEN.77]}") != stable_digest("TOKEN")
    assert is_token("s3://${Token[TOKEN.3]}/x") and not is_token("s3://bucket/x")
