"""Example web tasks for the browser environment (docs/web_tasks.md): `formtasks` is the task set."""
