/* main.c - the meshtrain command (src/cli/commands.c does the work). */
#include "mt_cli.h"

int main(int argc, char **argv)
{
    return mt_cli_main(argc, argv);
}
