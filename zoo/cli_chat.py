"""``zoo chat MODEL``: a conversation with an instruct model through its chat template,
one user message a line of standard input (typed at a terminal, or a script piped in),
each reply streamed as it comes (:func:`zoo.stream_chat`)."""

from __future__ import annotations

import argparse
import sys

from .cli_decode import add_generation_options, generation_changes, input_lines, language_model

RESET = "/reset"
"""A line that starts the conversation again (the system message kept)."""


def add_chat(sub) -> None:
    """``zoo chat MODEL [--system TEXT]``."""
    p = sub.add_parser("chat", help="chat with an instruct model (Qwen2.5-Instruct, "
                       "TinyLlama-Chat) through its chat template, streamed; one message a "
                       "line of standard input")
    p.add_argument("model", help="a transformers folder with a chat template "
                   "(local-dir:PATH, hf-hub:OWNER/NAME)")
    p.add_argument("--system", help="the system message that opens the conversation")
    add_generation_options(p)
    p.add_argument("--device")
    p.set_defaults(func=cmd_chat)


def cmd_chat(args: argparse.Namespace) -> int:
    """Read a user message a line, print the assistant's reply as it comes, keep the
    conversation; at a terminal a prompt (``>>> ``) is shown on standard error. An empty
    line is skipped, ``/reset`` starts again, the end of input ends the chat."""
    from .decoding import settings_for
    from .decoding.chat import chat_tokenizer, stream_chat
    from .decoding.text import stop_strings
    from .derived import fixed_weights

    model = language_model(args.model, args.device, "chat")
    changes = generation_changes(args)
    settings_for(model, None, **changes)  # a setting out of range: one zoo error, first
    stop_strings(args.stop)
    chat_tokenizer(model)  # no chat template: one zoo error before any input is read
    opening = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(opening)
    terminal = sys.stdin.isatty()
    lines = input_lines()
    with fixed_weights(model):
        while True:
            if terminal:
                print(">>> ", end="", file=sys.stderr, flush=True)
            line = next(lines, None)
            if line is None:
                break
            if not line.strip():
                continue
            if line.strip() == RESET:
                messages = list(opening)
                continue
            messages.append({"role": "user", "content": line})
            reply = ""
            for piece in stream_chat(model, messages, stop=args.stop, **changes):
                reply += piece
                print(piece, end="", flush=True)
            print(flush=True)
            messages.append({"role": "assistant", "content": reply})
    if terminal:
        print(file=sys.stderr)
    return 0
