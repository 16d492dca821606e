"""The control plane: store, request log, client keys and the links to other replicas
(`plane.py`), built beside the pipeline it feeds (`build.py`) and started and stopped with
it (`lifecycle.py`)."""
