"""The task functions of the web examples; a worker runs them: ``walqueue-worker --socket S web_tasks:app``.

The app has no source here: the web process binds its client
(`app.bind(...)`), and walqueue-worker runs the app on its own.
"""

from __future__ import annotations

from walqueue.worker import App, current

app = App()


@app.task(max_attempts=5)
def send_welcome(email: str) -> dict[str, str]:
    """Pretend to send an email; the result says what was sent. Then schedule a follow-up, committed with this."""
    current().enqueue(note_sent, email)
    return {"to": email, "subject": "Welcome!"}


@app.task
def note_sent(email: str) -> str:
    return f"noted {email}"


@app.task
async def add(a: int, b: int) -> int:
    """An async task: it runs on the worker's event loop."""
    return a + b
