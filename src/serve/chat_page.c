/* chat_page.c — the chat page served at GET / (src/serve/chat.html): the
 * file's bytes are assembled into the binary as they are (.incbin), so the
 * page stays plain HTML + JS with no build step and no file to find at run
 * time.  The Makefile makes this object depend on the .html file. */
#include "server.h"

__asm__(".section .rodata\n"
        ".global qw_chat_page_html\n"
        ".type qw_chat_page_html, @object\n"
        "qw_chat_page_html:\n"
        ".incbin \"src/serve/chat.html\"\n"
        ".byte 0\n"
        ".previous\n");
