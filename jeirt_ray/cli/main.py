"""`jeirt <command>`: one Typer app, a thin layer over jeirt_ray.api.jobs (the jobs) and the
serving and registry modules. It parses options, shows the pipeline's progress (the `jeirt`
logger) and results, and turns expected failures into one line and an exit code. The commands
live by group: study.py (evaluate, train, tune, report ...), service.py (serve, route ...),
feedback.py, onboard.py, data.py, keys.py, zoo.py."""

from __future__ import annotations

import typer

from ..core import logs
from .data import data_app, registry_app
from .feedback import decision, feedback, grade, judge, learn, shadow
from .keys import keys_app
from .onboard import onboard_app
from .output import console
from .service import k8s_check, mlflow_ui, replay, route, serve_cmd
from .study import analyze, demo, encode, evaluate, report, train, tune
from .zoo import similar_cmd

app = typer.Typer(help="JE-IRT for LLMs: embed LLMs and questions in one space, evaluate, route.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(data_app, name="data")
app.add_typer(registry_app, name="registry")
app.add_typer(keys_app, name="keys")
app.add_typer(onboard_app, name="onboard")
app.command("similar")(similar_cmd)
app.command("feedback")(feedback)
app.command("grade")(grade)
app.command("judge")(judge)
app.command("learn")(learn)
app.command("shadow")(shadow)
app.command("decision")(decision)
for command in (evaluate, train, demo, tune, report, analyze):
    app.command()(command)
app.command("serve")(serve_cmd)
app.command()(route)
app.command()(replay)
app.command("k8s-check")(k8s_check)
app.command("mlflow-ui")(mlflow_ui)
app.command()(encode)


@app.callback()
def _options(ctx: typer.Context,
             verbose: bool = typer.Option(False, "--verbose", "-v", help="also show Ray's, MLflow's and the other "
                                          "libraries' log lines here (they always go to the log file)"),
             debug: bool = typer.Option(False, "--debug", help="verbose, and show the traceback of a failure")):
    """JE-IRT for LLMs: embed LLMs and questions in one space, evaluate, route."""
    logs.setup(ctx.invoked_subcommand or "jeirt", verbose=verbose, debug=debug)
    logs.show_progress(lambda line: console.print(line, markup=False, highlight=False))


def main() -> None:
    """The `jeirt` entry point: expected failures that reach here (no Ray, an encoder that cannot
    load, a missing registry entry) end with one line and the log file's path, no traceback."""
    from ..distributed import RayUnavailable
    from ..encoders.sentence import EncoderError
    try:
        app()
    except (RayUnavailable, EncoderError, LookupError) as e:
        if logs.State.debug:
            raise
        console.print(f"[red]{e}[/red]")
        if logs.State.file is not None:
            console.print(f"log: {logs.State.file}; `jeirt --debug ...` shows the traceback")
        raise SystemExit(1)


if __name__ == "__main__":
    main()

command = typer.main.get_command(app)  # the Click command, for the generated CLI reference (docs/reference/cli.md)
