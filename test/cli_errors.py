"""The CLI's contract for a user error: one line on stderr, named, no traceback."""


def assert_one_line_error(capsys, message: str) -> None:
    """Check what the CLI printed: one ``jax-perception: ...`` line holding ``message``."""
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith('jax-perception: ') and '\n' not in err, err
    assert message in err
    assert 'Traceback' not in captured.out + captured.err
