"""The templates of ``fedldp new-protocol`` (client/cli/newprotocol.py): package data of the wheel
(``*.tmpl``, ``string.Template`` placeholders), read with ``importlib.resources``."""
