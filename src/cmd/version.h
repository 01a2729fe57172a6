/* The version of tern's programs. */
#ifndef TN_CMD_VERSION_H
#define TN_CMD_VERSION_H

#define TN_VERSION "0.1.0"

#endif
