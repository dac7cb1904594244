"""The sandbox side: the shim, the ``ags-webview-url`` helper and the sandbox's init."""
