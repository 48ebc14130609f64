"""``sbconform serve``: the reference namespace behind an AMQP 1.0 listener (python-qpid-proton)."""

from .config import Config, ConfigError, config_json, load_config, parse_config
from .server import Server, serve_in_thread

__all__ = ["Config", "ConfigError", "Server", "config_json", "load_config", "parse_config", "serve_in_thread"]
