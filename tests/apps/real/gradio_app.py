"""A Gradio app (its page calls the server's queue and reads the result as server-sent
events): reverses a word. Run inside a sandbox by tests/e2e/test_real_apps.py."""

from __future__ import annotations

import sys

import gradio as gr


def reverse(word: str) -> str:
    return word[::-1]


demo = gr.Interface(
    fn=reverse,
    inputs=gr.Textbox(label="word"),
    outputs=gr.Textbox(label="reversed"),
    flagging_mode="never",
)

if __name__ == "__main__":
    demo.launch(server_name="127.0.0.1", server_port=int(sys.argv[1]))
