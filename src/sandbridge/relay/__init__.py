"""App origins: the listeners' data path (``listener/``), the C front door (``front/``), what
both stand on (``host/``), and what runs inside the sandbox (``inside/``)."""
