package dev.gatun.models.text;

/**
 * One message of a conversation, as a chat template reads it ({@code message['role']}, {@code message.content}).
 *
 * @param role    "system", "user", "assistant" or whatever else the template knows
 * @param content the message's text
 */
public record Message(String role, String content) {
    public Message {
        if (role == null || content == null) throw new TokenizerException("Message: role and content must not be null (role " + role + ")");
    }

    public static Message system(String content) { return new Message("system", content); }

    public static Message user(String content) { return new Message("user", content); }

    public static Message assistant(String content) { return new Message("assistant", content); }
}
