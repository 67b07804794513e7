"""A fake model server for the real coding agents: Anthropic Messages, OpenAI Responses and
Gemini, streamed as the real APIs stream, answering from markers in the prompt. README.md
beside this file lists the markers and what each endpoint supports."""

from tests.support.fake_models.server import Exchange, FakeModelServer, fake_model_server

__all__ = ["Exchange", "FakeModelServer", "fake_model_server"]
