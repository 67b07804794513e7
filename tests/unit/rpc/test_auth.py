"""The token file's format and the bearer check, without a server (the wire is covered by
tests/integration/test_auth.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral_server.rpc.auth import (
    TOKEN_INVALID,
    TOKEN_MISSING,
    TokenFile,
    TokenFileError,
    check,
    parse_tokens,
    unauthenticated,
)


def test_blank_lines_comments_and_surrounding_spaces_are_ignored() -> None:
    text = "# ops team\n\n  alpha-1  \n\t# old: beta\nga#mma\n"
    assert parse_tokens(text, "f") == ((b"alpha-1", "full"), (b"ga#mma", "full"))


def test_a_token_may_carry_its_role_and_a_bare_one_is_full() -> None:
    text = "alpha\nbeta read\ngamma   full\n"
    assert parse_tokens(text, "f") == ((b"alpha", "full"), (b"beta", "read"), (b"gamma", "full"))


def test_the_role_of_a_token_is_told_and_a_stranger_has_none(tmp_path: Path) -> None:
    file = tokens(tmp_path, "alpha", "beta read")
    assert (file.role_of(b"alpha"), file.role_of(b"beta"), file.role_of(b"zeta")) == (
        "full",
        "read",
        None,
    )


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n  # another\n"])
def test_a_file_without_a_token_is_an_error(text: str) -> None:
    with pytest.raises(TokenFileError, match="holds no token"):
        parse_tokens(text, "f")


@pytest.mark.parametrize("line", ["two words", "tok write", "caf\u00e9", "nul\x00byte"])
def test_a_line_that_is_not_one_header_token_is_an_error_naming_the_line_only(line: str) -> None:
    with pytest.raises(TokenFileError, match="f line 2") as caught:
        parse_tokens(f"good\n{line}\n", "f")
    assert line not in str(caught.value)


def tokens(tmp_path: Path, *lines: str) -> TokenFile:
    path = tmp_path / "tokens"
    path.write_text("".join(f"{line}\n" for line in lines))
    return TokenFile(path)


def bearer(value: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", value),)


def test_the_check_names_a_missing_and_an_invalid_token(tmp_path: Path) -> None:
    file = tokens(tmp_path, "alpha", "beta")
    assert check(file, None) == TOKEN_MISSING
    assert check(file, (("x-other", "alpha"),)) == TOKEN_MISSING
    assert check(file, bearer("Bearer alpha")) == ""
    assert check(file, bearer("BEARER beta")) == ""
    for wrong in ("Bearer gamma", "Bearer alph", "Bearer alphaa", "alpha", "Basic alpha", ""):
        assert check(file, bearer(wrong)) == TOKEN_INVALID, wrong
    assert check(file, (*bearer("Bearer alpha"), *bearer("Bearer beta"))) == TOKEN_INVALID


def test_a_reload_swaps_the_tokens_and_a_bad_one_keeps_them(tmp_path: Path) -> None:
    file = tokens(tmp_path, "alpha")
    file.path.write_text("beta\n")
    assert file.reload() and file.accepts(b"beta") and not file.accepts(b"alpha")
    file.path.write_text("# emptied by mistake\n")
    assert not file.reload() and file.accepts(b"beta")
    file.path.unlink()
    assert not file.reload() and file.accepts(b"beta")


def test_an_unreadable_file_is_an_error_at_construction(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read the token file"):
        TokenFile(tmp_path / "absent")
    with pytest.raises(TokenFileError, match="cannot read the token file"):
        TokenFile(tmp_path)


def test_the_refusal_is_unauthenticated_with_an_error_info_reason() -> None:
    status = unauthenticated(TOKEN_INVALID)
    assert status.code.name == "UNAUTHENTICATED"
    assert any(key == "grpc-status-details-bin" for key, _ in status.trailing_metadata)


def test_a_token_file_others_can_read_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens"
    path.write_text("alpha\n")
    path.chmod(0o600)
    TokenFile(path)
    assert "readable by others" not in caplog.text
    path.chmod(0o640)
    TokenFile(path)
    assert f"the token file {path} is readable by others" in caplog.text


def test_open_calls_are_revoked_when_their_token_goes_and_forgotten_when_they_end(
    tmp_path: Path,
) -> None:
    file = tokens(tmp_path, "alpha", "beta")
    told: list[str] = []
    with file.open_call(b"alpha") as dropped, file.open_call(b"beta") as kept:
        dropped.on_revoke(lambda: told.append("alpha"))
        kept.on_revoke(lambda: told.append("beta"))
        assert file.open_calls == 2
        file.path.write_text("beta\n")
        assert file.reload()
        assert told == ["alpha"] and dropped.revoked.is_set() and not kept.revoked.is_set()
        assert file.open_calls == 1
        dropped.on_revoke(lambda: told.append("late"))  # revoked already: told at once
        assert told == ["alpha", "late"]
    assert file.open_calls == 0
    assert not kept.revoked.is_set()  # it ended; a later reload does not reach it
    file.path.write_text("gamma\n")
    assert file.reload() and told == ["alpha", "late"]


def test_a_call_opened_with_a_token_that_is_not_valid_is_revoked_at_once(tmp_path: Path) -> None:
    file = tokens(tmp_path, "alpha")
    with file.open_call(b"gamma") as call:
        assert call.revoked.is_set()
        assert file.open_calls == 0
