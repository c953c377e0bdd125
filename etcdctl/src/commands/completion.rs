//! `etcdctl completion bash|zsh|fish|powershell`: a shell completion script for the whole
//! command tree (clap_complete's), with --no-descriptions leaving the command texts out.

use clap::{Args, Command, Subcommand};
use clap_complete::Shell;

use crate::error::Result;
use crate::global::go_bool;

/// Generate the autocompletion script for the specified shell
#[derive(Subcommand, Debug)]
pub enum CompletionCmd {
    /// Generate the autocompletion script for bash
    #[command(
        override_usage = "!",
        long_about = "Generate the autocompletion script for the bash shell.\n\nThis script depends on the 'bash-completion' package.\nIf it is not installed already, you can install it via your OS's package manager.\n\nTo load completions in your current shell session:\n\n\tsource <(etcdctl completion bash)\n\nTo load completions for every new session, execute once:\n\n#### Linux:\n\n\tetcdctl completion bash > /etc/bash_completion.d/etcdctl\n\n#### macOS:\n\n\tetcdctl completion bash > $(brew --prefix)/etc/bash_completion.d/etcdctl\n\nYou will need to start a new shell for this setup to take effect."
    )]
    Bash(CompletionArgs),
    /// Generate the autocompletion script for zsh
    #[command(
        override_usage = "",
        long_about = "Generate the autocompletion script for the zsh shell.\n\nIf shell completion is not already enabled in your environment you will need\nto enable it.  You can execute the following once:\n\n\techo \"autoload -U compinit; compinit\" >> ~/.zshrc\n\nTo load completions in your current shell session:\n\n\tsource <(etcdctl completion zsh); compdef _etcdctl etcdctl\n\nTo load completions for every new session, execute once:\n\n#### Linux:\n\n\tetcdctl completion zsh > \"${fpath[1]}/_etcdctl\"\n\n#### macOS:\n\n\tetcdctl completion zsh > $(brew --prefix)/share/zsh/site-functions/_etcdctl\n\nYou will need to start a new shell for this setup to take effect."
    )]
    Zsh(CompletionArgs),
    /// Generate the autocompletion script for fish
    #[command(
        override_usage = "",
        long_about = "Generate the autocompletion script for the fish shell.\n\nTo load completions in your current shell session:\n\n\tetcdctl completion fish | source\n\nTo load completions for every new session, execute once:\n\n\tetcdctl completion fish > ~/.config/fish/completions/etcdctl.fish\n\nYou will need to start a new shell for this setup to take effect."
    )]
    Fish(CompletionArgs),
    /// Generate the autocompletion script for powershell
    #[command(
        override_usage = "",
        long_about = "Generate the autocompletion script for powershell.\n\nTo load completions in your current shell session:\n\n\tetcdctl completion powershell | Out-String | Invoke-Expression\n\nTo load completions for every new session, add the output of the above command\nto your powershell profile."
    )]
    Powershell(CompletionArgs),
}

#[derive(Args, Debug)]
pub struct CompletionArgs {
    /// disable completion descriptions
    #[arg(long = "no-descriptions", default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub no_descriptions: bool,
}

/// Every command's texts removed, so that the script carries names and flags only.
fn without_descriptions(cmd: Command) -> Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let ids: Vec<String> = cmd
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    let mut cmd = cmd.about(None::<&str>).long_about(None::<&str>);
    for id in ids {
        cmd = cmd.mut_arg(id, |a| a.help(None::<&str>).long_help(None::<&str>));
    }
    for n in names {
        cmd = cmd.mut_subcommand(n, without_descriptions);
    }
    cmd
}

pub fn run(c: &CompletionCmd) -> Result<()> {
    let (shell, a) = match c {
        CompletionCmd::Bash(a) => (Shell::Bash, a),
        CompletionCmd::Zsh(a) => (Shell::Zsh, a),
        CompletionCmd::Fish(a) => (Shell::Fish, a),
        CompletionCmd::Powershell(a) => (Shell::PowerShell, a),
    };
    let mut cmd = crate::command_tree();
    if a.no_descriptions {
        cmd = without_descriptions(cmd);
    }
    clap_complete::generate(shell, &mut cmd, "etcdctl", &mut std::io::stdout());
    Ok(())
}
