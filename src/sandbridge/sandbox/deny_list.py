"""sandbridge's built-in list of paths the owner's tools run or obey, each with its
reason (docs/security.md gives them all). The policy may add paths (``protect = PATH``
in ``.sandbridge/config``), never remove these."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Entry:
    """One built-in deny-list entry, relative to a project (or home) directory."""

    path: str
    directory: bool
    reason: str


# Relative to every project directory in a writable mount (the project root, the workdir,
# each writable --bind, every nested repository). docs/security.md gives each reason.
PROJECT_ENTRIES = (
    Entry(".sandbridge", True, "sandbridge's policy: the next run obeys it"),
    Entry(".gitmodules", False, "submodule URLs and update commands for the owner's git"),
    Entry(".gitconfig", False, "git config that an include.path may name"),
    Entry(".husky", True, "husky hook scripts run by the owner's next commit"),
    Entry(".vscode", True, "tasks.json, settings and launch configs run commands in VS Code"),
    Entry(".idea", True, "JetBrains run configurations and external tools"),
    Entry(".cursor", True, "Cursor rules, MCP servers and settings"),
    Entry(".devcontainer", True, "initializeCommand runs on the host"),
    Entry(".claude/commands", True, "Claude Code slash commands"),
    Entry(".claude/agents", True, "Claude Code agents"),
    Entry(".claude/hooks", True, "Claude Code hook scripts"),
    Entry(".claude/settings.json", False, "Claude Code hooks and permissions"),
    Entry(".claude/settings.local.json", False, "Claude Code hooks and permissions"),
    Entry(".mcp.json", False, "MCP servers are commands the agent host starts"),
    Entry(".npmrc", False, "script-shell, git, node-options run code on npm install"),
    Entry(".yarnrc", False, "yarn-path runs any script as yarn"),
    Entry(".yarnrc.yml", False, "yarnPath and plugins run any JavaScript as yarn"),
    Entry(".pnpmfile.cjs", False, "pnpm runs its hooks on install"),
    Entry(".envrc", False, "direnv runs it when the owner enters the directory"),
    Entry(".ripgreprc", False, "ripgrep options (--pre runs a command per file)"),
    Entry(".mise.toml", False, "mise runs its hooks and tasks, sets env on entering"),
    Entry("mise.toml", False, "mise runs its hooks and tasks, sets env on entering"),
    Entry(".cargo/config.toml", False, "rustc-wrapper, runners, aliases run on cargo build"),
    Entry(".cargo/config", False, "rustc-wrapper, runners, aliases run on cargo build"),
    Entry(".mvn", True, "Maven extensions and JVM options load code on mvn"),
    Entry(".bundle", True, "bundler's local config (usually ignored by git)"),
)
# Relative to the owner's home, when a writable mount is or contains it.
HOME_ENTRIES = (
    Entry(".bashrc", False, "run by every interactive bash"),
    Entry(".bash_profile", False, "run by login bash"),
    Entry(".bash_login", False, "run by login bash"),
    Entry(".bash_logout", False, "run when login bash exits"),
    Entry(".profile", False, "run by login shells"),
    Entry(".zshenv", False, "run by every zsh"),
    Entry(".zshrc", False, "run by every interactive zsh"),
    Entry(".zprofile", False, "run by login zsh"),
    Entry(".zlogin", False, "run by login zsh"),
    Entry(".gitconfig", False, "the owner's git config"),
    Entry(".config/git", True, "the owner's git config, attributes and ignores"),
    Entry(".config/fish", True, "fish start-up files"),
    Entry(".config/systemd", True, "user services"),
    Entry(".config/autostart", True, "programs the desktop starts at login"),
    Entry(".ssh", True, "ssh config (ProxyCommand), keys and rc"),
    Entry(".npmrc", False, "npm settings that run code"),
    Entry(".ripgreprc", False, "ripgrep options"),
    Entry(".claude", True, "Claude Code settings, hooks, commands and agents"),
    Entry(".claude.json", False, "Claude Code MCP servers"),
)
